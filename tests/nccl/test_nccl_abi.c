/* libnccl.so.2 as a caller sees it through NCCL's own nccl.h, without a GPU: every function
 * NCCL 2.28.9 exports links, the version and error strings answer, and calls fail cleanly
 * with a message (no GPU, bad arguments, what weft does not serve). With a GPU present the
 * no-GPU checks are skipped (tests/nccl/test_nccl_gpu.c covers that machine). */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"

/* The nccl_device headers (C++ only) declare these; pointers to them are all this test needs. */
typedef struct {
  int nRanks, rank, stride;
} team_t;
ncclResult_t ncclDevCommCreate(ncclComm_t, const void *, void *);
ncclResult_t ncclDevCommDestroy(ncclComm_t, const void *);
ncclResult_t ncclLsaBarrierCreateRequirement(team_t, int, void *, void *);
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t, team_t, int, void *, void *);
ncclResult_t ncclLLA2ACreateRequirement(int, int, void *, void *);
int ncclLLA2ACalcSlots(int, int);
team_t ncclTeamWorld(ncclComm_t);
team_t ncclTeamLsa(ncclComm_t);
team_t ncclTeamRail(ncclComm_t);
int ncclTeamRankToWorld(ncclComm_t, team_t, int);
int ncclTeamRankToLsa(ncclComm_t, team_t, int);
void ncclResetDebugInitInternal(void);
/* newer than some 2.28 headers (2.28.3 lacks it) */
ncclResult_t ncclCommRevoke(ncclComm_t, int);

/* The 53 functions of NCCL 2.28.9's libnccl.so.2 (nm -D --defined-only), each linked. */
static void every_function_links(void) {
  void (*const fns[])(void) = {
      (void (*)(void))ncclAllGather,
      (void (*)(void))ncclAllReduce,
      (void (*)(void))ncclAlltoAll,
      (void (*)(void))ncclBcast,
      (void (*)(void))ncclBroadcast,
      (void (*)(void))ncclCommAbort,
      (void (*)(void))ncclCommCount,
      (void (*)(void))ncclCommCuDevice,
      (void (*)(void))ncclCommDeregister,
      (void (*)(void))ncclCommDestroy,
      (void (*)(void))ncclCommFinalize,
      (void (*)(void))ncclCommGetAsyncError,
      (void (*)(void))ncclCommInitAll,
      (void (*)(void))ncclCommInitRank,
      (void (*)(void))ncclCommInitRankConfig,
      (void (*)(void))ncclCommInitRankScalable,
      (void (*)(void))ncclCommRegister,
      (void (*)(void))ncclCommRevoke,
      (void (*)(void))ncclCommShrink,
      (void (*)(void))ncclCommSplit,
      (void (*)(void))ncclCommUserRank,
      (void (*)(void))ncclCommWindowDeregister,
      (void (*)(void))ncclCommWindowRegister,
      (void (*)(void))ncclDevCommCreate,
      (void (*)(void))ncclDevCommDestroy,
      (void (*)(void))ncclGather,
      (void (*)(void))ncclGetErrorString,
      (void (*)(void))ncclGetLastError,
      (void (*)(void))ncclGetUniqueId,
      (void (*)(void))ncclGetVersion,
      (void (*)(void))ncclGinBarrierCreateRequirement,
      (void (*)(void))ncclGroupEnd,
      (void (*)(void))ncclGroupSimulateEnd,
      (void (*)(void))ncclGroupStart,
      (void (*)(void))ncclLLA2ACalcSlots,
      (void (*)(void))ncclLLA2ACreateRequirement,
      (void (*)(void))ncclLsaBarrierCreateRequirement,
      (void (*)(void))ncclMemAlloc,
      (void (*)(void))ncclMemFree,
      (void (*)(void))ncclRecv,
      (void (*)(void))ncclRedOpCreatePreMulSum,
      (void (*)(void))ncclRedOpDestroy,
      (void (*)(void))ncclReduce,
      (void (*)(void))ncclReduceScatter,
      (void (*)(void))ncclScatter,
      (void (*)(void))ncclSend,
      (void (*)(void))ncclTeamLsa,
      (void (*)(void))ncclTeamRail,
      (void (*)(void))ncclTeamRankToLsa,
      (void (*)(void))ncclTeamRankToWorld,
      (void (*)(void))ncclTeamWorld,
      (void (*)(void))ncclResetDebugInitInternal,
      (void (*)(void))pncclAllReduce,
  };
  int n = (int)(sizeof fns / sizeof fns[0]);
  for (int i = 0; i < n; i++)
    EXPECT(fns[i] != NULL, "function %d", i);
  EXPECT(n == 53, "%d functions listed", n);
}

static void version_and_strings(void) {
  int v = 0;
  EXPECT(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE, "version %d", v);
  EXPECT(ncclGetVersion(NULL) == ncclInvalidArgument, "NULL version");
  for (int r = 0; r <= ncclNumResults; r++) {
    const char *s = ncclGetErrorString((ncclResult_t)r);
    EXPECT(s && *s, "no string for result %d", r);
  }
  EXPECT(strstr(ncclGetErrorString(ncclInvalidUsage), "invalid usage"), "InvalidUsage text");
}

static void bad_arguments(void) {
  float buf[4] = {0};
  EXPECT(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, NULL, NULL) == ncclInvalidArgument,
         "NULL comm");
  EXPECT(strstr(ncclGetLastError(NULL), "comm is NULL"), "message: %s", ncclGetLastError(NULL));
  long fake[16] = {0};
  ncclComm_t bogus = (ncclComm_t)(void *)fake;
  EXPECT(ncclSend(buf, 1, ncclFloat32, 0, bogus, NULL) == ncclInvalidArgument, "foreign comm");
  EXPECT(strstr(ncclGetLastError(NULL), "not a communicator"), "message: %s",
         ncclGetLastError(NULL));
  EXPECT(ncclGroupEnd() == ncclInvalidUsage, "GroupEnd without start");
  EXPECT(ncclGroupStart() == ncclSuccess && ncclGroupStart() == ncclSuccess, "GroupStart");
  EXPECT(ncclGroupEnd() == ncclSuccess && ncclGroupEnd() == ncclSuccess, "empty group");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage, "SimulateEnd without a group");
  EXPECT(ncclGroupStart() == ncclSuccess && ncclGroupSimulateEnd(&sim) == ncclSuccess,
         "SimulateEnd of an empty group");
  EXPECT(sim.estimatedTime == NCCL_UNDEF_FLOAT, "estimate %g", (double)sim.estimatedTime);
  EXPECT(ncclCommDestroy(NULL) == ncclSuccess, "destroying NULL");
  ncclComm_t c = (ncclComm_t)1;
  EXPECT(ncclCommInitRank(&c, 2, (ncclUniqueId){{0}}, 2) == ncclInvalidArgument, "rank 2 of 2");
  EXPECT(c == NULL, "newcomm left set");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0;
  EXPECT(ncclCommInitRankConfig(&c, 1, (ncclUniqueId){{0}}, 0, &cfg) == ncclInvalidArgument,
         "config without its magic");
  EXPECT(strstr(ncclGetLastError(NULL), "NCCL_CONFIG_INITIALIZER"), "message: %s",
         ncclGetLastError(NULL));
  EXPECT(ncclCommShrink(NULL, NULL, 0, &c, NULL, 0) == ncclInvalidArgument, "shrink of NULL");
  EXPECT(c == NULL, "shrink left newcomm set");
  EXPECT(strstr(ncclGetLastError(NULL), "ncclCommShrink"), "message: %s", ncclGetLastError(NULL));
  EXPECT(ncclDevCommCreate(NULL, NULL, NULL) == ncclInvalidUsage, "device API");
  EXPECT(strstr(ncclGetLastError(NULL), "device API"), "message: %s", ncclGetLastError(NULL));
  EXPECT(ncclLLA2ACalcSlots(16, 4) < 0, "LLA2A slots");
  team_t t = ncclTeamWorld(NULL);
  EXPECT(t.rank == -1, "team of no comm");
  int x = 0;
  EXPECT(ncclCommCount(NULL, &x) == ncclInvalidArgument, "count of NULL");
  ncclResult_t async = ncclSuccess;
  EXPECT(ncclCommGetAsyncError(NULL, &async) == ncclInvalidArgument, "async of NULL");
  ncclRedOp_t op;
  EXPECT(ncclRedOpCreatePreMulSum(&op, buf, ncclFloat32, ncclScalarHostImmediate, NULL) ==
             ncclInvalidArgument,
         "premul on NULL comm");
}

/* Without a GPU every call that needs one fails with a message, and nothing is left behind. */
static void without_a_gpu(void) {
  ncclUniqueId id;
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess, "unique id needs no GPU");
  ncclComm_t c = (ncclComm_t)1;
  EXPECT(ncclCommInitRank(&c, 1, id, 0) == ncclUnhandledCudaError, "init without a GPU");
  EXPECT(c == NULL, "newcomm set after a failed init");
  EXPECT(strstr(ncclGetLastError(NULL), "no usable GPU"), "message: %s", ncclGetLastError(NULL));
  void *p = (void *)1;
  EXPECT(ncclMemAlloc(&p, 1 << 20) == ncclUnhandledCudaError && p == NULL, "MemAlloc");
  EXPECT(ncclMemFree(NULL) == ncclSuccess, "MemFree(NULL)");
  ncclComm_t all[2] = {0};
  EXPECT(ncclCommInitAll(all, 2, NULL) != ncclSuccess && !all[0] && !all[1], "InitAll");
}

int main(void) {
  every_function_links();
  version_and_strings();
  bad_arguments();
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0)
    without_a_gpu();
  else
    printf("test_nccl_abi: %d GPUs here: the no-GPU checks skipped\n", ngpu);
  printf("test_nccl_abi: %d failures\n", expect_failures);
  return expect_failures ? 1 : 0;
}

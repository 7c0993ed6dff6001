/* The NCCL ABI's mapping onto weft (src/nccl/map.c), no GPU needed: every ncclDataType_t to a
 * weft type of the same size and kind, every op and result code, the caller's ncclConfig_t of
 * any size, and the NCCL_* variables that become WEFT_* ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "shim.h"

static void dtypes(void) {
  static const struct {
    ncclDataType_t nccl;
    weft_dtype_t weft;
    size_t bytes;
  } want[] = {{ncclInt8, WEFT_I8, 1},
              {ncclUint8, WEFT_U8, 1},
              {ncclInt32, WEFT_I32, 4},
              {ncclUint32, WEFT_U32, 4},
              {ncclInt64, WEFT_I64, 8},
              {ncclUint64, WEFT_U64, 8},
              {ncclFloat16, WEFT_F16, 2},
              {ncclFloat32, WEFT_F32, 4},
              {ncclFloat64, WEFT_F64, 8},
              {ncclBfloat16, WEFT_BF16, 2},
              {ncclFloat8e4m3, WEFT_FP8_E4M3, 1},
              {ncclFloat8e5m2, WEFT_FP8_E5M2, 1}};
  int n = (int)(sizeof want / sizeof want[0]);
  EXPECT(n == ncclNumTypes, "%d of %d types listed", n, ncclNumTypes);
  for (int i = 0; i < n; i++) {
    weft_dtype_t got = WEFT_DTYPE_COUNT;
    EXPECT(shim_dtype(want[i].nccl, "t", &got) == ncclSuccess && got == want[i].weft,
           "nccl type %d -> %d", (int)want[i].nccl, (int)got);
    EXPECT(weft_dtype_size(got) == want[i].bytes, "size of %s", weft_dtype_name(got));
  }
  weft_dtype_t got;
  EXPECT(shim_dtype(ncclNumTypes, "fn", &got) == ncclInvalidArgument, "ncclNumTypes");
  EXPECT(strstr(shim_last_error(), "fn: data type 12"), "message %s", shim_last_error());
  EXPECT(shim_dtype((ncclDataType_t)-1, "fn", &got) == ncclInvalidArgument, "-1");
}

static void ops(void) {
  struct ncclComm c = {.magic = SHIM_MAGIC};
  pthread_mutex_init(&c.mu, NULL);
  static const weft_op_t want[ncclNumOps] = {[ncclSum] = WEFT_SUM,
                                             [ncclProd] = WEFT_PROD,
                                             [ncclMax] = WEFT_MAX,
                                             [ncclMin] = WEFT_MIN,
                                             [ncclAvg] = WEFT_AVG};
  shim_premul_t p;
  for (int o = 0; o < ncclNumOps; o++) {
    weft_op_t got = WEFT_OP_COUNT;
    EXPECT(shim_op(&c, (ncclRedOp_t)o, ncclFloat32, "f", &got, &p) == ncclSuccess &&
               got == want[o] && !p.used,
           "op %d -> %d", o, (int)got);
  }
  weft_op_t got;
  EXPECT(shim_op(&c, (ncclRedOp_t)ncclNumOps, ncclFloat32, "f", &got, &p) == ncclInvalidArgument,
         "no PreMulSum made yet");
  shim_premul_t made[2] = {{.used = 1, .dtype = ncclFloat32, .residence = ncclScalarHostImmediate},
                           {.used = 0, .dtype = ncclFloat16}};
  c.ops = made;
  c.nops = 2;
  EXPECT(shim_op(&c, (ncclRedOp_t)ncclNumOps, ncclFloat32, "f", &got, &p) == ncclSuccess &&
             got == WEFT_SUM && p.used,
         "PreMulSum 0");
  EXPECT(shim_op(&c, (ncclRedOp_t)ncclNumOps, ncclBfloat16, "f", &got, &p) == ncclInvalidArgument,
         "PreMulSum of another type");
  EXPECT(shim_op(&c, (ncclRedOp_t)(ncclNumOps + 1), ncclFloat16, "f", &got, &p) ==
             ncclInvalidArgument,
         "destroyed PreMulSum");
  EXPECT(shim_op(&c, (ncclRedOp_t)-3, ncclFloat16, "f", &got, &p) == ncclInvalidArgument, "-3");
  pthread_mutex_destroy(&c.mu);
}

static void results(void) {
  static const ncclResult_t want[] = {[WEFT_SUCCESS] = ncclSuccess,
                                      [WEFT_ERR_INVALID_ARG] = ncclInvalidArgument,
                                      [WEFT_ERR_NO_MEMORY] = ncclSystemError,
                                      [WEFT_ERR_SYSTEM] = ncclSystemError,
                                      [WEFT_ERR_TIMEOUT] = ncclRemoteError,
                                      [WEFT_ERR_PEER_LOST] = ncclRemoteError,
                                      [WEFT_ERR_PROTOCOL] = ncclRemoteError,
                                      [WEFT_ERR_MISMATCH] = ncclInvalidUsage,
                                      [WEFT_ERR_ABORTED] = ncclInvalidUsage,
                                      [WEFT_ERR_UNSUPPORTED] = ncclInvalidUsage,
                                      [WEFT_ERR_INTERNAL] = ncclInternalError,
                                      [WEFT_ERR_IN_PROGRESS] = ncclInProgress};
  for (int r = 0; r <= WEFT_ERR_IN_PROGRESS; r++)
    EXPECT(shim_result((weft_result_t)r) == want[r], "weft %d -> %d", r,
           (int)shim_result((weft_result_t)r));
  EXPECT(shim_result((weft_result_t)99) == ncclInternalError, "unknown");
  /* weft's message becomes the last error */
  weft_allreduce(NULL, NULL, 1, WEFT_F32, WEFT_SUM, NULL, NULL);
  EXPECT(shim_result(WEFT_ERR_INVALID_ARG) == ncclInvalidArgument &&
             strstr(shim_last_error(), "weft_allreduce"),
         "last error %s", shim_last_error());
}

static void configs(void) {
  int blocking = -1;
  unsetenv("NCCL_COMM_BLOCKING");
  EXPECT(shim_config(NULL, &blocking) == ncclSuccess && blocking == 1, "default blocking");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  EXPECT(shim_config(&cfg, &blocking) == ncclSuccess && blocking == 1, "undefined: blocking");
  cfg.blocking = 0;
  EXPECT(shim_config(&cfg, &blocking) == ncclSuccess && blocking == 0, "non-blocking");
  /* an older caller's smaller config still holds blocking */
  cfg.size = offsetof(ncclConfig_t, cgaClusterSize);
  EXPECT(shim_config(&cfg, &blocking) == ncclSuccess && blocking == 0, "older size");
  cfg.size = offsetof(ncclConfig_t, blocking);
  EXPECT(shim_config(&cfg, &blocking) == ncclInvalidArgument, "too small to hold blocking");
  cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0x12345678;
  EXPECT(shim_config(&cfg, &blocking) == ncclInvalidArgument, "bad magic");
  setenv("NCCL_COMM_BLOCKING", "0", 1);
  cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  EXPECT(shim_config(&cfg, &blocking) == ncclSuccess && blocking == 0, "NCCL_COMM_BLOCKING=0");
  cfg.blocking = 1;
  EXPECT(shim_config(&cfg, &blocking) == ncclSuccess && blocking == 1, "config wins");
  unsetenv("NCCL_COMM_BLOCKING");
}

static void environment(void) {
  unsetenv("WEFT_DEBUG");
  setenv("NCCL_DEBUG", "VERSION", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("WEFT_P2P_DISABLE", "0", 1);
  setenv("NCCL_P2P_DISABLE", "1", 1); /* WEFT_ set: the user's word stands */
  shim_env_once();
  const char *d = getenv("WEFT_DEBUG"), *i = getenv("WEFT_SOCKET_IFNAME");
  EXPECT(d && !strcmp(d, "WARN"), "WEFT_DEBUG %s", d ? d : "(unset)");
  EXPECT(i && !strcmp(i, "lo"), "WEFT_SOCKET_IFNAME %s", i ? i : "(unset)");
  EXPECT(!strcmp(getenv("WEFT_P2P_DISABLE"), "0"), "WEFT_P2P_DISABLE overwritten");
}

int main(void) {
  dtypes();
  ops();
  results();
  configs();
  environment();
  printf("test_map: %d failures\n", expect_failures);
  return expect_failures ? 1 : 0;
}

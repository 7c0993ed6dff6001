/* NCCL 2.28's device API (ncclDevComm and the resources its kernels use) has no weft
 * counterpart yet: creating one fails with ncclInvalidUsage and a message, so a caller
 * learns it at setup, never inside a kernel. The team queries are plain arithmetic on a
 * communicator and answer as NCCL does on one host (every weft device communicator is). */
#include <dlfcn.h>

#include "shim.h"

/* nccl_device/core.h's team, laid out as there; those headers are C++ only. */
typedef struct {
  int nRanks, rank, stride;
} team_t;

#define DEVICE_API_REFUSED(fn)                                                                     \
  shim_error(ncclInvalidUsage,                                                                     \
             "%s: NCCL's device API (ncclDevComm) is not supported by weft; use the host "         \
             "collectives",                                                                        \
             fn)

/* A fallback comm's call goes to the real library's function of the same name, looked up
 * here: these types live in NCCL's C++ device headers, not in fallback.h's table. */
#define DEVICE_API_FORWARD(comm, fn, type, ...)                                                    \
  do {                                                                                             \
    if (SHIM_IS_REAL(comm)) {                                                                      \
      __typeof__(type) f_;                                                                         \
      *(void **)&f_ = dlsym((comm)->fb->handle, fn);                                               \
      if (f_) return f_(__VA_ARGS__);                                                              \
    }                                                                                              \
  } while (0)

NCCL_EXPORT(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, const void *reqs, void *outDevComm) {
  DEVICE_API_FORWARD(comm, "ncclDevCommCreate", ncclResult_t(*)(ncclComm_t, const void *, void *),
                     comm->real, reqs, outDevComm);
  (void)comm, (void)reqs, (void)outDevComm;
  return DEVICE_API_REFUSED("ncclDevCommCreate");
}

NCCL_EXPORT(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, const void *devComm) {
  DEVICE_API_FORWARD(comm, "ncclDevCommDestroy", ncclResult_t(*)(ncclComm_t, const void *),
                     comm->real, devComm);
  (void)comm, (void)devComm;
  return DEVICE_API_REFUSED("ncclDevCommDestroy");
}

NCCL_EXPORT(ncclResult_t, ncclLsaBarrierCreateRequirement, team_t team, int nBarriers,
            void *outHandle, void *outReq) {
  (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  return DEVICE_API_REFUSED("ncclLsaBarrierCreateRequirement");
}

NCCL_EXPORT(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, team_t team,
            int nBarriers, void *outHandle, void *outReq) {
  DEVICE_API_FORWARD(comm, "ncclGinBarrierCreateRequirement",
                     ncclResult_t(*)(ncclComm_t, team_t, int, void *, void *), comm->real, team,
                     nBarriers, outHandle, outReq);
  (void)comm, (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
  return DEVICE_API_REFUSED("ncclGinBarrierCreateRequirement");
}

NCCL_EXPORT(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots, void *outHandle,
            void *outReq) {
  (void)nBlocks, (void)nSlots, (void)outHandle, (void)outReq;
  return DEVICE_API_REFUSED("ncclLLA2ACreateRequirement");
}

/* No slots without the device API; -1 tells a caller that checks. */
NCCL_EXPORT(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize) {
  (void)maxElts, (void)maxEltSize;
  DEVICE_API_REFUSED("ncclLLA2ACalcSlots");
  return -1;
}

static team_t world(ncclComm_t comm) {
  if (shim_ready(comm, "ncclTeam") != ncclSuccess) return (team_t){0, -1, 0};
  return (team_t){comm->nranks, comm->rank, 1};
}

NCCL_EXPORT(team_t, ncclTeamWorld, ncclComm_t comm) {
  DEVICE_API_FORWARD(comm, "ncclTeamWorld", team_t(*)(ncclComm_t), comm->real);
  return world(comm);
}

/* load/store-accessible peers: the whole communicator, on one host */
NCCL_EXPORT(team_t, ncclTeamLsa, ncclComm_t comm) {
  DEVICE_API_FORWARD(comm, "ncclTeamLsa", team_t(*)(ncclComm_t), comm->real);
  return world(comm);
}

/* the ranks of the same local index on every host: this rank alone on one host */
NCCL_EXPORT(team_t, ncclTeamRail, ncclComm_t comm) {
  DEVICE_API_FORWARD(comm, "ncclTeamRail", team_t(*)(ncclComm_t), comm->real);
  team_t w = world(comm);
  return (team_t){w.nRanks ? 1 : 0, w.nRanks ? 0 : -1, w.nRanks};
}

NCCL_EXPORT(int, ncclTeamRankToWorld, ncclComm_t comm, team_t team, int rank) {
  DEVICE_API_FORWARD(comm, "ncclTeamRankToWorld", int (*)(ncclComm_t, team_t, int), comm->real,
                     team, rank);
  team_t w = world(comm);
  return w.rank < 0 ? -1 : w.rank + (rank - team.rank) * team.stride;
}

NCCL_EXPORT(int, ncclTeamRankToLsa, ncclComm_t comm, team_t team, int rank) {
  DEVICE_API_FORWARD(comm, "ncclTeamRankToLsa", int (*)(ncclComm_t, team_t, int), comm->real, team,
                     rank);
  return pncclTeamRankToWorld(comm, team, rank); /* one host: the LSA team is the world */
}

/* Deprecated in NCCL and meaningless here: weft reads its log settings once. */
NCCL_EXPORT(void, ncclResetDebugInit, void) {}

/* NCCL exports this internal helper too; a caller that links it finds it here. */
__attribute__((visibility("default"))) void ncclResetDebugInitInternal(void);
void ncclResetDebugInitInternal(void) {}

// weft.h and weft_moe.h compile as C++ and their declarations link from C++ (extern "C").
#include "weft.h"
#include "weft_moe.h"

#include <cstdio>

int main() {
  weft_config_t cfg = WEFT_CONFIG_INIT;
  weft_moe_config_t moe = WEFT_MOE_CONFIG_INIT;
  if (cfg.size != sizeof(weft_config_t) || weft_get_version() != WEFT_VERSION_CODE) return 1;
  if (moe.size != sizeof(weft_moe_config_t) || moe.align != 1) return 1;
  // a NULL comm is refused: the symbol links and the argument check runs
  weft_moe_t m = nullptr;
  if (weft_moe_create(nullptr, &moe, &m) != WEFT_ERR_INVALID_ARG) return 1;
  std::printf("weft %s from C++\n", weft_result_string(WEFT_SUCCESS));
  return 0;
}

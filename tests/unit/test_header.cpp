// weft.h compiles as C++ and its declarations link from C++ (extern "C").
#include "weft.h"

#include <cstdio>

int main() {
  weft_config_t cfg = WEFT_CONFIG_INIT;
  if (cfg.size != sizeof(weft_config_t) || weft_get_version() != WEFT_VERSION_CODE) return 1;
  std::printf("weft %s from C++\n", weft_result_string(WEFT_SUCCESS));
  return 0;
}

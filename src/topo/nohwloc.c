/* Builds without hwloc (-Dhwloc=disabled, or libhwloc not found): the sysfs discovery is the
 * only one, and asking for hwloc says so. */
#include "err.h"
#include "topo.h"

int weft_topo_have_hwloc(void) { return 0; }

weft_result_t weft_topo_from_hwloc(const char *xml, weft_topo_t *t) {
  (void)t;
  return weft_set_error(WEFT_ERR_UNSUPPORTED,
                        "topology%s%s: this weft was built without hwloc (-Dhwloc)",
                        xml ? " from " : "", xml ? xml : "");
}

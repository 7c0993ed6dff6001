/* The engines of this build. Adding one is its folder under src/, its weft_engine_t, and a
 * line here: the first that serves a communicator's config runs it. */
#include "engine.h"

extern const weft_engine_t weft_engine_gpu, weft_engine_host;
const weft_engine_t *const weft_engines[] = {&weft_engine_gpu, &weft_engine_host};
const int weft_nengines = (int)(sizeof weft_engines / sizeof weft_engines[0]);

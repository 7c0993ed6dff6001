/* WEFT_* environment parameters: declared once in param.c with default and help text, so
 * the library (and collbench) can print them all. */
#ifndef WEFT_PARAM_H
#define WEFT_PARAM_H

#include <stdint.h>

/* The value from the environment, else the default; name must be in the table. */
const char *weft_param_str(const char *name);
int64_t weft_param_int(const char *name);

#endif

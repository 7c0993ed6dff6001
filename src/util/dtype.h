/* Element types: sizes, names, and conversion of 16- and 8-bit floats to and from f32
 * (round to nearest even; fp8 saturates to its largest finite value, NaN stays NaN). */
#ifndef WEFT_DTYPE_H
#define WEFT_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

float weft_f16_to_f32(uint16_t h);
uint16_t weft_f32_to_f16(float f);
float weft_bf16_to_f32(uint16_t b);
uint16_t weft_f32_to_bf16(float f);
float weft_e4m3_to_f32(uint8_t v);
uint8_t weft_f32_to_e4m3(float f);
float weft_e5m2_to_f32(uint8_t v);
uint8_t weft_f32_to_e5m2(float f);

/* Element i of buf as double / stored from double (test oracles and AVG scaling). 64-bit
 * integers past 2^53 round in the double; a negative value stored in an unsigned type wraps. */
double weft_dtype_load(weft_dtype_t t, const void *buf, size_t i);
void weft_dtype_store(weft_dtype_t t, void *buf, size_t i, double v);
int weft_dtype_is_float(weft_dtype_t t);

#endif

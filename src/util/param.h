/* WEFT_* environment parameters: each is one row of params.def (name, kind, default, range or
 * words, whether ranks must agree, help), read here by id so that a misspelt name fails to
 * compile. weft_params_check is the one rule for bad values; the accessors never fail. */
#ifndef WEFT_PARAM_H
#define WEFT_PARAM_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

typedef enum {
#define WEFT_PARAM(id, ...) WEFT_PARAM_##id,
#include "params.def"
#undef WEFT_PARAM
  WEFT_PARAM_COUNT
} weft_param_id_t;

typedef enum {
  WEFT_PARAM_KIND_INT,          /* an integer in [min, max] */
  WEFT_PARAM_KIND_STR,          /* any text */
  WEFT_PARAM_KIND_WORD,         /* one of words */
  WEFT_PARAM_KIND_WORD_ANYCASE, /* one of words, in any case */
  WEFT_PARAM_KIND_WORD_OR_INT   /* one of words, or an integer in [min, max] */
} weft_param_kind_t;

typedef struct {
  const char *name, *dflt;
  const char *words; /* space-separated; "" where none */
  const char *help;
  int64_t min, max;
  weft_param_kind_t kind;
  int agreed; /* ranks of a device communicator must set it alike */
} weft_param_def_t;

/* How many parameters weft_param_agreed fills, known at compile time so callers can size
 * their arrays. */
#define WEFT_PARAM_AGREED_AGREED 1
#define WEFT_PARAM_AGREED_LOCAL  0
enum {
  WEFT_PARAM_NAGREED = 0
#define WEFT_PARAM(id, name, kind, dflt, min, max, words, agree, help) +WEFT_PARAM_AGREED_##agree
#include "params.def"
#undef WEFT_PARAM
};

/* The row of id; NULL for an id out of range. */
const weft_param_def_t *weft_param_def(weft_param_id_t id);

/* Parses every variable that is set (and not empty): integer syntax and range, words. The
 * first that fails sets an error naming the variable, its value and what is allowed, and
 * returns WEFT_ERR_INVALID_ARG. Once it passes, the accessors below read what was set. */
weft_result_t weft_params_check(void); /* param_api.c */
/* The same without the error module: 1 and the message in msg when some variable is refused. */
int weft_params_refusal(char *msg, size_t len);
/* Whether text passes id's rule, as weft_params_check applies it ("" passes: unset). */
int weft_param_valid(weft_param_id_t id, const char *text);

/* The value from the environment, else the default. One that fails its rule (refused by
 * weft_params_check) reads as the default too. get_int is for INT parameters (others: 0). */
int64_t weft_param_get_int(weft_param_id_t id);
const char *weft_param_get_str(weft_param_id_t id);

/* Fills values[0..max) with one value per AGREED parameter, in table order (integers: the
 * value read; others: a 64-bit FNV-1a hash of the text read, integers written in decimal)
 * and returns how many there are, WEFT_PARAM_NAGREED, whatever max is. */
int weft_param_agreed(uint64_t *values, int max);
/* The name of the i-th AGREED parameter; "?" out of range. */
const char *weft_param_agreed_name(int i);

/* The row of the i-th AGREED parameter; NULL out of range. */
const weft_param_def_t *weft_param_agreed_def(int i);
/* all: nranks vectors of width values (weft_param_agreed's, and any the caller adds). The index
 * of the first value in which some rank differs from rank 0, that rank in *rank; -1 where all
 * agree. */
int weft_param_differ(const uint64_t *all, int nranks, int width, int *rank);

#endif

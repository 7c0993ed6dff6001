/* The table of every WEFT_* variable, expanded from params.def (collbench --params prints
 * it; scripts/gen_params.py writes docs/parameters.md's table from the same rows), and its one
 * rule: weft_params_check refuses a set value that does not parse or that the row does not
 * allow, and the accessors read the default for anything it would refuse. */
#include "param.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const weft_param_def_t params[WEFT_PARAM_COUNT] = {
#define WEFT_PARAM(id, name_, kind_, dflt_, min_, max_, words_, agree_, help_)                     \
  [WEFT_PARAM_##id] = {.name = name_,                                                              \
                       .dflt = dflt_,                                                              \
                       .words = words_,                                                            \
                       .help = help_,                                                              \
                       .min = (min_),                                                              \
                       .max = (max_),                                                              \
                       .kind = WEFT_PARAM_KIND_##kind_,                                            \
                       .agreed = WEFT_PARAM_AGREED_##agree_},
#include "params.def"
#undef WEFT_PARAM
};

const weft_param_def_t *weft_param_def(weft_param_id_t id) {
  return (unsigned)id < WEFT_PARAM_COUNT ? &params[id] : NULL;
}

/* strtoll's syntax, as weft has always read integers (base 0: 0x hex, leading 0 octal), over
 * the whole text; an overflow is refused rather than saturated. */
static int parse_int(const char *s, int64_t *v) {
  char *end = NULL;
  errno = 0;
  long long x = strtoll(s, &end, 0);
  if (end == s || *end || errno) return -1;
  *v = (int64_t)x;
  return 0;
}

/* The index of s among p's words, -1 where it is none of them. */
static int word_index(const weft_param_def_t *p, const char *s) {
  size_t n = strlen(s);
  int i = 0;
  for (const char *w = p->words; *w; i++) {
    size_t len = strcspn(w, " ");
    int anycase = p->kind == WEFT_PARAM_KIND_WORD_ANYCASE;
    if (len == n && (anycase ? strncasecmp(w, s, n) : strncmp(w, s, n)) == 0) return i;
    w += len;
    w += strspn(w, " ");
  }
  return -1;
}

/* Copies p's word i into buf. */
static void word_at(const weft_param_def_t *p, int i, char *buf, size_t len) {
  const char *w = p->words;
  for (; i > 0; i--) {
    w += strcspn(w, " ");
    w += strspn(w, " ");
  }
  snprintf(buf, len, "%.*s", (int)strcspn(w, " "), w);
}

/* NULL where text passes p's rule (empty text: unset, the default), else why it does not;
 * *v gets an integer's value. */
static const char *refusal(const weft_param_def_t *p, const char *s, int64_t *v) {
  if (!s[0]) return NULL;
  switch (p->kind) {
  case WEFT_PARAM_KIND_STR: return NULL;
  case WEFT_PARAM_KIND_WORD:
  case WEFT_PARAM_KIND_WORD_ANYCASE: return word_index(p, s) >= 0 ? NULL : "unknown word";
  case WEFT_PARAM_KIND_WORD_OR_INT:
    if (word_index(p, s) >= 0) return NULL;
    if (parse_int(s, v) != 0) return "neither a known word nor an integer";
    break;
  case WEFT_PARAM_KIND_INT:
    if (parse_int(s, v) != 0) return "not an integer";
    break;
  }
  return *v < p->min || *v > p->max ? "out of range" : NULL;
}

/* What p allows, in words, for error messages. */
static void allowed(const weft_param_def_t *p, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = 0;
  for (const char *w = p->words; *w && o < len;) {
    size_t n = strcspn(w, " ");
    o += (size_t)snprintf(buf + o, len - o, "%s%.*s", o ? ", " : "", (int)n, w);
    w += n;
    w += strspn(w, " ");
  }
  if (o < len && p->kind == WEFT_PARAM_KIND_WORD_ANYCASE)
    o += (size_t)snprintf(buf + o, len - o, ", in any case");
  if (o >= len || (p->kind != WEFT_PARAM_KIND_INT && p->kind != WEFT_PARAM_KIND_WORD_OR_INT))
    return;
  if (p->max == INT64_MAX)
    snprintf(buf + o, len - o, "%san integer from %lld", o ? ", or " : "", (long long)p->min);
  else
    snprintf(buf + o, len - o, "%san integer in [%lld, %lld]", o ? ", or " : "", (long long)p->min,
             (long long)p->max);
}

/* The variable as set, NULL where unset or empty (which read the default). */
static const char *env(const weft_param_def_t *p) {
  const char *v = getenv(p->name);
  return v && v[0] ? v : NULL;
}

int weft_params_refusal(char *msg, size_t len) {
  for (int i = 0; i < WEFT_PARAM_COUNT; i++) {
    const weft_param_def_t *p = &params[i];
    const char *v = env(p), *why;
    int64_t x = 0;
    if (!v || !(why = refusal(p, v, &x))) continue;
    char ok[256];
    allowed(p, ok, sizeof ok);
    snprintf(msg, len, "%s=%.64s%s: %s (valid: %s)", p->name, v, strlen(v) > 64 ? "..." : "", why,
             ok);
    return 1;
  }
  return 0;
}

int weft_param_valid(weft_param_id_t id, const char *text) {
  const weft_param_def_t *p = weft_param_def(id);
  int64_t x = 0;
  return p && text && !refusal(p, text, &x);
}

int64_t weft_param_get_int(weft_param_id_t id) {
  const weft_param_def_t *p = weft_param_def(id);
  if (!p || p->kind != WEFT_PARAM_KIND_INT) return 0;
  const char *v = env(p);
  int64_t x = 0;
  if (v && !refusal(p, v, &x)) return x;
  return parse_int(p->dflt, &x) == 0 ? x : 0; /* test_param checks every default parses */
}

const char *weft_param_get_str(weft_param_id_t id) {
  const weft_param_def_t *p = weft_param_def(id);
  if (!p) return "";
  const char *v = env(p);
  int64_t x = 0;
  return v && !refusal(p, v, &x) ? v : p->dflt;
}

/* ---- agreement between the ranks of a device communicator ---- */

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

/* Texts that mean the same hash alike: a word as the table spells it, an integer in
 * decimal (0x100 and 256 agree), unset as the default. */
static uint64_t agreed_value(weft_param_id_t id) {
  const weft_param_def_t *p = &params[id];
  if (p->kind == WEFT_PARAM_KIND_INT) return (uint64_t)weft_param_get_int(id);
  const char *s = weft_param_get_str(id);
  char canon[64];
  int64_t x = 0;
  int w = p->kind == WEFT_PARAM_KIND_STR ? -1 : word_index(p, s);
  if (w >= 0) {
    word_at(p, w, canon, sizeof canon);
    s = canon;
  } else if (p->kind == WEFT_PARAM_KIND_WORD_OR_INT && parse_int(s, &x) == 0) {
    snprintf(canon, sizeof canon, "%lld", (long long)x);
    s = canon;
  }
  return fnv1a(s);
}

int weft_param_agreed(uint64_t *values, int max) {
  int n = 0;
  for (int i = 0; i < WEFT_PARAM_COUNT; i++) {
    if (!params[i].agreed) continue;
    if (values && n < max) values[n] = agreed_value((weft_param_id_t)i);
    n++;
  }
  return n;
}

const char *weft_param_agreed_name(int i) {
  for (int k = 0; k < WEFT_PARAM_COUNT && i >= 0; k++)
    if (params[k].agreed && i-- == 0) return params[k].name;
  return "?";
}

const weft_param_def_t *weft_param_agreed_def(int i) {
  for (int k = 0; k < WEFT_PARAM_COUNT && i >= 0; k++)
    if (params[k].agreed && i-- == 0) return &params[k];
  return NULL;
}

int weft_param_differ(const uint64_t *all, int nranks, int width, int *rank) {
  for (int i = 0; i < width; i++)
    for (int r = 1; r < nranks; r++)
      if (all[(size_t)r * (size_t)width + i] != all[i]) {
        *rank = r;
        return i;
      }
  return -1;
}

/* Reads the quoted messages of the Failures table in docs/failures.md (see readme_quotes.h).
 * The path comes from the build (WEFT_README), so the check cannot silently find no file. */
#include "readme_quotes.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
  fclose(f);
  if (buf) buf[got] = 0;
  return buf;
}

int readme_quotes(const char *row, char *out, size_t cap) {
  const char *path = getenv("WEFT_TEST_README") ? getenv("WEFT_TEST_README") : WEFT_README;
  char *text = slurp(path);
  if (!text) return snprintf(out, cap, "cannot read %s", path), -1;
  char *sec = strstr(text, "\n## Failures\n"), *end = sec ? strstr(sec + 1, "\n## ") : NULL;
  if (end) *end = 0;
  char key[128];
  snprintf(key, sizeof key, "\n| %s", row);
  char *line = sec ? strstr(sec, key) : NULL;
  if (!line) {
    snprintf(out, cap, "%s has no Failures row starting \"%s\"", path, row);
    free(text);
    return -1;
  }
  line++;
  char *eol = strchr(line, '\n');
  if (eol) *eol = 0;
  int n = 0;
  size_t used = 0;
  out[0] = 0;
  for (char *q = strchr(line, '"'); q; q = strchr(q + 1, '"')) {
    char *close = strchr(q + 1, '"');
    if (!close) break;
    int w = snprintf(out + used, cap - used, "%.*s\n", (int)(close - q - 1), q + 1);
    if (w < 0 || (size_t)w >= cap - used) break;
    used += (size_t)w;
    n++;
    q = close;
  }
  free(text);
  return n;
}

static int same_but_numbers(const char *a, size_t na, const char *b) {
  static const char host[] = "(host ";
  const size_t nh = sizeof host - 1;
  size_t i = 0, j = 0, nb = strlen(b);
  while (i < na && j < nb) {
    if (na - i > nh && !strncmp(a + i, host, nh) && !strncmp(b + j, host, nh)) {
      i += nh, j += nh; /* both name a host: any name, up to the parenthesis */
      while (i < na && a[i] != ')')
        i++;
      while (j < nb && b[j] != ')')
        j++;
    } else if (isdigit((unsigned char)a[i]) && isdigit((unsigned char)b[j])) {
      while (i < na && isdigit((unsigned char)a[i]))
        i++;
      while (j < nb && isdigit((unsigned char)b[j]))
        j++;
    } else if (a[i++] != b[j++]) {
      return 0;
    }
  }
  return i == na && j == nb;
}

int readme_quoted(const char *quotes, const char *msg) {
  for (const char *q = quotes; *q;) {
    const char *nl = strchr(q, '\n');
    size_t len = nl ? (size_t)(nl - q) : strlen(q);
    if (same_but_numbers(q, len, msg)) return 1;
    q += len + (nl != NULL);
  }
  return 0;
}

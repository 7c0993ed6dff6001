/* A tiny RGB canvas and PNG writer (its own deflate, fixed codes, no zlib): collbench's plots
 * and the examples' timelines. A 3x5 font scaled by CANVAS_SCALE. */
#include "canvas.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SCALE CANVAS_SCALE

int canvas_new(canvas_t *c, int w, int h) {
  c->w = w, c->h = h;
  c->px = malloc((size_t)w * (size_t)h * 3);
  if (c->px) memset(c->px, 255, (size_t)w * (size_t)h * 3);
  return c->px ? 0 : -1;
}

void canvas_free(canvas_t *c) {
  free(c->px);
  c->px = NULL;
}

void canvas_rect(canvas_t *c, int x0, int y0, int x1, int y1, const uint8_t rgb[3]) {
  for (int y = y0; y < y1; y++)
    for (int x = x0; x < x1; x++)
      canvas_put(c, x, y, rgb);
}

void canvas_put(canvas_t *c, int x, int y, const uint8_t rgb[3]) {
  if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
  memcpy(c->px + ((size_t)y * c->w + x) * 3, rgb, 3);
}

void canvas_line(canvas_t *c, int x0, int y0, int x1, int y1, const uint8_t rgb[3], int thick) {
  int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  for (;;) {
    for (int a = 0; a < thick; a++)
      for (int b = 0; b < thick; b++)
        canvas_put(c, x0 + a, y0 + b, rgb);
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}

/* 3x5 glyphs, rows top to bottom, 3 bits each (left bit first). */
static const struct {
  char ch;
  uint16_t rows[5];
} FONT[] = {
    {'0', {7, 5, 5, 5, 7}}, {'1', {2, 6, 2, 2, 7}}, {'2', {7, 1, 7, 4, 7}}, {'3', {7, 1, 3, 1, 7}},
    {'4', {5, 5, 7, 1, 1}}, {'5', {7, 4, 7, 1, 7}}, {'6', {7, 4, 7, 5, 7}}, {'7', {7, 1, 1, 2, 2}},
    {'8', {7, 5, 7, 5, 7}}, {'9', {7, 5, 7, 1, 7}}, {'A', {2, 5, 7, 5, 5}}, {'B', {6, 5, 6, 5, 6}},
    {'C', {7, 4, 4, 4, 7}}, {'D', {6, 5, 5, 5, 6}}, {'E', {7, 4, 6, 4, 7}}, {'F', {7, 4, 6, 4, 4}},
    {'G', {7, 4, 5, 5, 7}}, {'H', {5, 5, 7, 5, 5}}, {'I', {7, 2, 2, 2, 7}}, {'J', {1, 1, 1, 5, 7}},
    {'K', {5, 5, 6, 5, 5}}, {'L', {4, 4, 4, 4, 7}}, {'M', {5, 7, 7, 5, 5}}, {'N', {6, 5, 5, 5, 5}},
    {'O', {7, 5, 5, 5, 7}}, {'P', {7, 5, 7, 4, 4}}, {'Q', {7, 5, 5, 7, 1}}, {'R', {6, 5, 6, 5, 5}},
    {'S', {7, 4, 7, 1, 7}}, {'T', {7, 2, 2, 2, 2}}, {'U', {5, 5, 5, 5, 7}}, {'V', {5, 5, 5, 5, 2}},
    {'W', {5, 5, 7, 7, 5}}, {'X', {5, 5, 2, 5, 5}}, {'Y', {5, 5, 2, 2, 2}}, {'Z', {7, 1, 2, 4, 7}},
    {'_', {0, 0, 0, 0, 7}}, {'.', {0, 0, 0, 0, 2}}, {'/', {1, 1, 2, 4, 4}}, {':', {0, 2, 0, 2, 0}},
    {'-', {0, 0, 7, 0, 0}}, {'(', {1, 2, 2, 2, 1}}, {')', {4, 2, 2, 2, 4}}};

void canvas_text(canvas_t *c, int x, int y, const char *s, const uint8_t rgb[3]) {
  for (; *s; s++, x += 4 * SCALE) {
    char ch = (char)toupper((unsigned char)*s);
    for (size_t g = 0; g < sizeof FONT / sizeof FONT[0]; g++) {
      if (FONT[g].ch != ch) continue;
      for (int r = 0; r < 5; r++)
        for (int b = 0; b < 3; b++)
          if (FONT[g].rows[r] >> (2 - b) & 1)
            for (int a = 0; a < SCALE; a++)
              for (int d = 0; d < SCALE; d++)
                canvas_put(c, x + b * SCALE + a, y + r * SCALE + d, rgb);
    }
  }
}

/* ---- PNG ---- */
static uint32_t crc_table[256];

static uint32_t crc32_of(uint32_t crc, const uint8_t *p, size_t n) {
  if (!crc_table[1])
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++)
        c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      crc_table[i] = c;
    }
  crc = ~crc;
  for (size_t i = 0; i < n; i++)
    crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

static void be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static int chunk(FILE *f, const char *type, const uint8_t *data, size_t n) {
  uint8_t hdr[8], crc[4];
  be32(hdr, (uint32_t)n);
  memcpy(hdr + 4, type, 4);
  uint32_t c = crc32_of(crc32_of(0, (const uint8_t *)type, 4), data, n);
  be32(crc, c);
  return fwrite(hdr, 1, 8, f) == 8 && (n == 0 || fwrite(data, 1, n, f) == n) &&
                 fwrite(crc, 1, 4, f) == 4
             ? 0
             : -1;
}

/* Deflate with the fixed Huffman codes (RFC 1951, 3.2.6): bits LSB first, codes MSB first. */
typedef struct {
  uint8_t *out;
  size_t n;
  uint32_t bits;
  int nbits;
} bitw_t;

static void put_bits(bitw_t *w, uint32_t v, int n) {
  w->bits |= v << w->nbits, w->nbits += n;
  while (w->nbits >= 8)
    w->out[w->n++] = (uint8_t)w->bits, w->bits >>= 8, w->nbits -= 8;
}

static void put_code(bitw_t *w, uint32_t code, int len) {
  uint32_t r = 0;
  for (int i = 0; i < len; i++)
    r |= (code >> i & 1) << (len - 1 - i);
  put_bits(w, r, len);
}

static void put_symbol(bitw_t *w, int sym) {
  if (sym < 144)
    put_code(w, 0x30 + (uint32_t)sym, 8);
  else if (sym < 256)
    put_code(w, 0x190 + (uint32_t)(sym - 144), 9);
  else if (sym < 280)
    put_code(w, (uint32_t)(sym - 256), 7);
  else
    put_code(w, 0xc0 + (uint32_t)(sym - 280), 8);
}

static const uint16_t LEN_BASE[29] = {3,  4,  5,  6,   7,   8,   9,   10,  11, 13,
                                      15, 17, 19, 23,  27,  31,  35,  43,  51, 59,
                                      67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t LEN_EXTRA[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t DIST_BASE[30] = {
    1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
    193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t DIST_EXTRA[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static void put_match(bitw_t *w, int len, int dist) {
  int c = 28, d = 29;
  while (LEN_BASE[c] > len)
    c--;
  while (DIST_BASE[d] > dist)
    d--;
  put_symbol(w, 257 + c);
  put_bits(w, (uint32_t)(len - LEN_BASE[c]), LEN_EXTRA[c]);
  put_code(w, (uint32_t)d, 5);
  put_bits(w, (uint32_t)(dist - DIST_BASE[d]), DIST_EXTRA[d]);
}

/* One block: each position takes the longer repeat of the pixel before (3 bytes back) or of
 * the row above, else a literal; plots are mostly flat, so this shrinks them a hundredfold. */
static size_t deflate_fixed(const uint8_t *in, size_t n, size_t row, uint8_t *out) {
  bitw_t w = {out, 0, 0, 0};
  put_bits(&w, 1, 1), put_bits(&w, 1, 2); /* BFINAL, fixed codes */
  for (size_t i = 0; i < n;) {
    size_t best = 0, dist = 0, cand[2] = {3, row};
    for (int k = 0; k < 2; k++) {
      size_t d = cand[k], l = 0;
      if (d > i || d > 32768) continue;
      while (l < 258 && i + l < n && in[i + l] == in[i + l - d])
        l++;
      if (l > best) best = l, dist = d;
    }
    if (best >= 3) {
      put_match(&w, (int)best, (int)dist);
      i += best;
    } else {
      put_symbol(&w, in[i++]);
    }
  }
  put_symbol(&w, 256);
  if (w.nbits) put_bits(&w, 0, 8 - w.nbits);
  return w.n;
}

int canvas_png(const char *path, const canvas_t *c) {
  size_t row = (size_t)c->w * 3 + 1, raw_n = row * (size_t)c->h;
  size_t z_n = 2 + raw_n / 8 * 9 + 64 + 4; /* a literal is at most 9 bits */
  uint8_t *raw = malloc(raw_n), *z = malloc(z_n);
  int rc = -1;
  FILE *f = NULL;
  if (!raw || !z) goto out;
  for (int y = 0; y < c->h; y++) {
    raw[(size_t)y * row] = 0; /* filter: none */
    memcpy(raw + (size_t)y * row + 1, c->px + (size_t)y * c->w * 3, (size_t)c->w * 3);
  }
  size_t o = 0;
  z[o++] = 0x78, z[o++] = 0x01;
  uint32_t a = 1, b = 0;
  for (size_t i = 0; i < raw_n; i++)
    a = (a + raw[i]) % 65521, b = (b + a) % 65521;
  o += deflate_fixed(raw, raw_n, row, z + o);
  be32(z + o, b << 16 | a);
  o += 4;
  uint8_t ihdr[13] = {0};
  be32(ihdr, (uint32_t)c->w);
  be32(ihdr + 4, (uint32_t)c->h);
  ihdr[8] = 8, ihdr[9] = 2; /* 8-bit RGB */
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  f = fopen(path, "wb");
  if (!f) goto out;
  rc = fwrite(sig, 1, 8, f) == 8 && chunk(f, "IHDR", ihdr, 13) == 0 &&
               chunk(f, "IDAT", z, o) == 0 && chunk(f, "IEND", NULL, 0) == 0
           ? 0
           : -1;
  if (fclose(f) != 0) rc = -1;
out:
  free(raw);
  free(z);
  return rc;
}

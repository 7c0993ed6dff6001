/* The mixture-of-experts MLP: see moe_layer.h. The gate's weights are its softmax
 * probabilities of the chosen experts (not renormalised), so the gate learns through them;
 * the balance loss is DeepSeek-V3's sequence-wise one, E * sum_e f_e * P_e per sequence (f_e:
 * the share of its choices that went to e, P_e: its mean probability of e), whose gradient
 * flows through P only. */
#include "moe_layer.h"

#include <math.h>
#include <string.h>

#include "ops.h"

/* Offset of tensor p in a layer, and of local expert e's part of it. */
static size_t at(const gpt_t *m, int p) { return gpt_param(m, 0, p) - gpt_param(m, 0, 0); }
static size_t expert_at(const gpt_t *m, int p, int e) {
  return at(m, p) + (size_t)e * ((at(m, p + 1) - at(m, p)) / (size_t)m->local_experts);
}

/* ---- routing within the process (hooks NULL) ---- */

/* Each choice to local expert id % local experts: every expert in an unsplit model; in a
 * shard, a stand-in for the exchange with the same expected work (compute-only runs). The
 * map is made on the host (m->route_host) from the ids there. */
static long local_route(const gpt_t *m, const moe_act_t *a, int N) {
  int El = m->local_experts, k = m->c.topk, *ids = m->route_host, *rtok = ids + (size_t)N * k;
  long r = 0;
  if (OP(get, ids, a->ids, sizeof *ids * (size_t)N * k)) return -1;
  for (int e = 0; e < El; e++) { /* expert-major, tokens in order within an expert */
    a->offsets[e] = r;
    for (int i = 0; i < N * k; i++)
      if (ids[i] >= 0 && ids[i] % El == e && (size_t)r < m->max_rows) rtok[r++] = i;
    a->counts[e] = r - a->offsets[e];
  }
  OP(put, a->rtok, rtok, sizeof *rtok * (size_t)r);
  return r;
}

/* Micro-batch u of a layer's activations: its tokens' entries, and its rows from `first`
 * (rows and row-sized arrays only once the earlier micro-batches' are known). */
static moe_act_t micro(const gpt_t *m, const moe_act_t *a, int u, int Nu, long first) {
  size_t C = (size_t)m->c.channels, H = 4 * C, k = (size_t)m->c.topk, t = (size_t)u * Nu;
  size_t El = (size_t)m->local_experts, r = (size_t)first;
  return (moe_act_t){.x = a->x + t * C,
                     .probs = a->probs + t * (size_t)m->c.experts,
                     .w = a->w + t * k,
                     .f = a->f,
                     .rx = a->rx + r * C,
                     .rw = a->rw + r,
                     .rh = a->rh + r * H,
                     .rg = a->rg + r * H,
                     .ry = a->ry + r * C,
                     .ids = a->ids + t * k,
                     .rtok = a->rtok + r,
                     .counts = a->counts + (size_t)u * El,
                     .offsets = a->offsets + (size_t)u * El,
                     .rows = a->rows + u};
}

static void route(const gpt_t *m, const gpt_io_t *io, int key, const moe_act_t *a, int N,
                  size_t room) {
  long r =
      io->route ? io->route(io->arg, key, a->ids, N, a->counts, a->offsets) : local_route(m, a, N);
  *a->rows = r < 0 || (size_t)r > room ? 0 : r; /* a failed route: the trainer says so */
  if (*a->rows == 0) memset(a->counts, 0, sizeof *a->counts * (size_t)m->local_experts);
}

static void dispatch(const gpt_t *m, const gpt_io_t *io, int key, const moe_act_t *a,
                     const float *x, const float *w, float *rows, float *rw) {
  if (io->dispatch) return io->dispatch(io->arg, key, x, w, rows, rw);
  MOP(gather, rows, rw, x, w, a->rtok, *a->rows, m->c.channels, m->c.topk);
}

static void combine(const gpt_t *m, const gpt_io_t *io, int key, const moe_act_t *a,
                    const float *rows, const float *rw, float *y, int N) {
  if (io->combine) return io->combine(io->arg, key, rows, rw, y);
  MOP(scatter, y, rows, rw, a->rtok, *a->rows, m->c.channels, m->c.topk, N);
}

static void wait_for(const gpt_io_t *io, int key) {
  if (io->wait) io->wait(io->arg, key);
}

/* Micro-batches of B sequences. */
static int micros(int B) { return B % MOE_MICRO ? 1 : MOE_MICRO; }

/* Routes every micro-batch of layer l (the keys' layouts), filling us[] with their slices. */
static void route_all(const gpt_t *m, const gpt_io_t *io, int l, const moe_act_t *a, int B,
                      moe_act_t *us) {
  int U = micros(B), Nu = B / U * m->c.seq;
  long first = 0;
  for (int u = 0; u < U; u++) {
    us[u] = micro(m, a, u, Nu, first);
    route(m, io, l * MOE_MICRO + u, &us[u], Nu, m->max_rows - (size_t)first);
    first += *us[u].rows;
  }
}

/* ---- the gate ---- */

/* The balance loss, weighted, the mean over the B sequences (moe_ops.h's balance sums). */
static float balance_loss(const gpt_t *m, const moe_act_t *a, int B) {
  int T = m->c.seq, E = m->c.experts;
  double total = MOP(balance, a->f, a->probs, B, T, E);
  return m->c.aux * (float)(total * E / T / B);
}

/* ---- the passes ---- */

/* The experts' MLPs over micro-batch u's rows. */
static void experts_fwd(const gpt_t *m, const moe_act_t *u, const float *lw) {
  int C = m->c.channels, H = 4 * C;
  for (int e = 0; e < m->local_experts; e++) {
    size_t o = (size_t)u->offsets[e];
    int n = (int)u->counts[e];
    OP(matmul_fwd, u->rh + o * H, u->rx + o * C, lw + expert_at(m, P_FCW, e),
       lw + expert_at(m, P_FCB, e), n, C, H);
    OP(gelu_fwd, u->rg + o * H, u->rh + o * H, n * H);
    OP(matmul_fwd, u->ry + o * C, u->rg + o * H, lw + expert_at(m, P_PROJW, e),
       lw + expert_at(m, P_PROJB, e), n, H, C);
  }
}

float moe_forward(const gpt_t *m, const gpt_io_t *io, int l, moe_act_t *a, const float *lw,
                  float *out, int B) {
  int C = m->c.channels, N = B * m->c.seq, U = micros(B), Nu = N / U;
  moe_act_t us[MOE_MICRO];
  int T = m->c.seq, E = m->c.experts, k = m->c.topk;
  float cap = m->c.capacity > 0 ? ceilf(m->c.capacity * (float)T * (float)k / (float)E) : 0;
  OP(matmul_fwd, a->probs, a->x, lw + at(m, P_GATEW), NULL, N, C, E);
  MOP(softmax, a->probs, N, E);
  MOP(gate, a->ids, a->w, a->f, a->probs, B, T, E, k, cap);
  route_all(m, io, l, a, B, us);
  /* every dispatch issued, then each micro-batch's experts while the next one's travel */
  for (int u = 0; u < U; u++)
    dispatch(m, io, l * MOE_MICRO + u, &us[u], us[u].x, us[u].w, us[u].rx, us[u].rw);
  for (int u = 0; u < U; u++) {
    wait_for(io, l * MOE_MICRO + u);
    experts_fwd(m, &us[u], lw);
    combine(m, io, l * MOE_MICRO + u, &us[u], us[u].ry, us[u].rw, out + (size_t)u * Nu * C, Nu);
  }
  for (int u = 0; u < U; u++)
    wait_for(io, l * MOE_MICRO + u);
  return balance_loss(m, a, B);
}

/* Micro-batch u's backward from its rows' output gradients (dy): the gate weights' gradients
 * (dy . y, sent home at each row's slot column of gr), then the experts'. Rows: the layer's
 * scratch from row `first`. */
static void experts_bwd(const gpt_t *m, const gpt_io_t *io, int key, const moe_act_t *u,
                        const moe_scratch_t *s, long first, const float *lw, float *lg, float *yg,
                        float *yx, int Nu) {
  int C = m->c.channels, H = 4 * C;
  long R = *u->rows;
  size_t f = (size_t)first;
  float *dy = s->dy + f * C, *dx = s->dx + f * C, *gr = s->gr + f * C, *rslot = s->rslot + f;
  float *dh = s->dh + f * H, *dg = s->dg + f * H;
  OP(zero, dx, sizeof(float) * (size_t)R * C);
  OP(zero, dh, sizeof(float) * (size_t)R * H);
  OP(zero, dg, sizeof(float) * (size_t)R * H);
  MOP(rows_bwd, gr, dy, u->ry, u->rw, rslot, R, C);
  combine(m, io, key, u, gr, NULL, yg, Nu);
  for (int e = 0; e < m->local_experts; e++) {
    size_t o = (size_t)u->offsets[e];
    int n = (int)u->counts[e];
    OP(matmul_bwd, dg + o * H, lg + expert_at(m, P_PROJW, e), lg + expert_at(m, P_PROJB, e),
       dy + o * C, u->rg + o * H, lw + expert_at(m, P_PROJW, e), n, H, C);
    OP(gelu_bwd, dh + o * H, u->rh + o * H, dg + o * H, n * H);
    OP(matmul_bwd, dx + o * C, lg + expert_at(m, P_FCW, e), lg + expert_at(m, P_FCB, e), dh + o * H,
       u->rx + o * C, lw + expert_at(m, P_FCW, e), n, C, H);
  }
  combine(m, io, key, u, dx, NULL, yx, Nu);
}

void moe_backward(const gpt_t *m, const gpt_io_t *io, int l, const moe_act_t *a,
                  const moe_scratch_t *s, const float *lw, float *lg, const float *dout, float *dx,
                  int B, float scale) {
  int C = m->c.channels, T = m->c.seq, N = B * T, E = m->c.experts, k = m->c.topk;
  int U = micros(B), Nu = N / U;
  moe_act_t us[MOE_MICRO];
  long first[MOE_MICRO];
  /* every row gets its token's output gradient, and its slot (s->slots: i % k, set once by
   * gpt.c) to send the gate's back */
  for (int u = 0, f = 0; u < U; f += (int)a->rows[u], u++) {
    us[u] = micro(m, a, u, Nu, f), first[u] = f;
    dispatch(m, io, l * MOE_MICRO + u, &us[u], dout + (size_t)u * Nu * C,
             s->slots + (size_t)u * Nu * k, s->dy + (size_t)f * C, s->rslot + f);
  }
  for (int u = 0; u < U; u++) {
    wait_for(io, l * MOE_MICRO + u);
    experts_bwd(m, io, l * MOE_MICRO + u, &us[u], s, first[u], lw, lg, s->y + (size_t)u * Nu * C,
                s->yx + (size_t)u * Nu * C, Nu);
  }
  for (int u = 0; u < U; u++)
    wait_for(io, l * MOE_MICRO + u);
  OP(accumulate, dx, s->yx, N * C);
  /* the gate: d(probability) from the chosen weights (their gradients in s->y) and the
   * balance loss, then through the softmax */
  float bal = scale * m->c.aux * (float)E / ((float)B * (float)T);
  MOP(gate_bwd, s->dp, a->probs, a->f, a->ids, s->y, N, T, E, k, C, bal);
  OP(matmul_bwd, dx, lg + at(m, P_GATEW), NULL, s->dp, a->x, lw + at(m, P_GATEW), N, C, E);
}

void moe_replay(const gpt_t *m, const gpt_io_t *io, int l, const moe_act_t *a,
                const moe_scratch_t *s, int B, int backward) {
  int C = m->c.channels, U = micros(B), Nu = B / U * m->c.seq, key = l * MOE_MICRO;
  moe_act_t us[MOE_MICRO];
  if (!backward) route_all(m, io, l, a, B, us);
  for (int u = 0, f = 0; u < U; f += (int)a->rows[u], u++)
    us[u] = micro(m, a, u, Nu, f);
  for (int u = 0; u < U; u++)
    dispatch(m, io, key + u, &us[u], s->y, s->slots, us[u].rx, us[u].rw);
  for (int u = 0; u < U; u++) {
    wait_for(io, key + u);
    if (backward) combine(m, io, key + u, &us[u], us[u].ry, NULL, s->yx + (size_t)u * Nu * C, Nu);
    combine(m, io, key + u, &us[u], us[u].ry, NULL, s->y + (size_t)u * Nu * C, Nu);
  }
  for (int u = 0; u < U; u++)
    wait_for(io, key + u);
}

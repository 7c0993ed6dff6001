/* The GPT's operations, forward and backward, on the CPU in f32 (ops_cpu.c). Shapes: N rows
 * (batch x sequence) of C channels; backward functions add into their gradient outputs. */
#ifndef WEFT_EXAMPLES_OPS_H
#define WEFT_EXAMPLES_OPS_H

void op_encoder_fwd(float *out, const int *tokens, const float *wte, const float *wpe, int B, int T,
                    int C);
void op_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T,
                    int C);
void op_layernorm_fwd(float *out, float *mean, float *rstd, const float *in, const float *w,
                      const float *b, int N, int C);
void op_layernorm_bwd(float *din, float *dw, float *db, const float *dout, const float *in,
                      const float *w, const float *mean, const float *rstd, int N, int C);
/* out[N][OC] = in[N][C] . w[OC][C]^T + bias (bias may be NULL) */
void op_matmul_fwd(float *out, const float *in, const float *w, const float *bias, int N, int C,
                   int OC);
/* out[N][OC] += bias; dbias += the column sums of dout */
void op_bias_fwd(float *out, const float *bias, int N, int OC);
void op_bias_bwd(float *dbias, const float *dout, int N, int OC);
void op_matmul_bwd(float *din, float *dw, float *dbias, const float *dout, const float *in,
                   const float *w, int N, int C, int OC);
/* qkv [B][T][3C] -> out [B][T][C]; att [B][NH][T][T] keeps the softmax for the backward */
void op_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* datt: scratch of T floats */
void op_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                      int T, int C, int NH, float *datt);
void op_gelu_fwd(float *out, const float *in, int n);
void op_gelu_bwd(float *din, const float *in, const float *dout, int n);
void op_add(float *out, const float *a, const float *b, int n);
void op_accumulate(float *dst, const float *src, int n); /* dst += src */
/* losses[N] and probs[N][V] from logits; returns the mean loss */
float op_xent_fwd(float *losses, float *probs, const float *logits, const int *targets, int N,
                  int V);
/* dlogits = (probs - onehot(target)) * scale */
void op_xent_bwd(float *dlogits, const float *probs, const int *targets, int N, int V, float scale);

#endif

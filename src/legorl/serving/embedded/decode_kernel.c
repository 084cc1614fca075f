/* Decode attention read in place from the paged KV pool (paged.py): one query token per row, fp32.
 *
 * For each row r and KV head h, the row's keys are read block by block through its block table, scored against
 * the g = heads / kv_heads query heads that share them (GQA), softmaxed, and its values summed: each K/V row of
 * the pool is read once per step and layer, nothing is gathered into a padded batch. Built once per machine by
 * decode_kernel.py and called through ctypes (which drops the GIL, so thread replicas run it side by side).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXG 32
#define MAXD 512

static inline float dot(const float *restrict a, const float *restrict b, int64_t d) {
    float acc = 0.f;
    for (int64_t j = 0; j < d; j++) acc += a[j] * b[j];
    return acc;
}

/* q[r, qh, :] lives at q + r * q_row + qh * q_head; out[r, qh, :] at out + r * o_row + qh * o_head.
 * k, v: one layer's pool [kv_heads, slots, d]. tables: [nd, width] block ids; lens: [nd] context lengths.
 * Returns 0, or 1 (shape out of range), or 2 (out of memory). */
int legorl_paged_decode(const float *restrict q, int64_t q_row, int64_t q_head, const float *restrict k,
                        const float *restrict v, int64_t slots, const int64_t *restrict tables,
                        const int64_t *restrict lens, int64_t nd, int64_t width, int64_t heads, int64_t kv_heads,
                        int64_t d, int64_t block_size, float scale, float *restrict out, int64_t o_row,
                        int64_t o_head) {
    int64_t g = heads / kv_heads, longest = 0;
    if (g < 1 || g > MAXG || d > MAXD || heads % kv_heads) return 1;
    for (int64_t r = 0; r < nd; r++) {
        if (lens[r] < 1 || lens[r] > width * block_size) return 1;
        longest = lens[r] > longest ? lens[r] : longest;
    }
    float *s = malloc(sizeof(float) * (size_t)(g * longest));
    float *acc = malloc(sizeof(float) * (size_t)(g * d));
    if (!s || !acc) {
        free(s);
        free(acc);
        return 2;
    }
    for (int64_t r = 0; r < nd; r++) {
        int64_t len = lens[r];
        const int64_t *tab = tables + r * width;
        for (int64_t h = 0; h < kv_heads; h++) {
            const float *kh = k + h * slots * d, *vh = v + h * slots * d;
            float mx[MAXG], inv[MAXG];
            for (int64_t i = 0; i < g; i++) mx[i] = -3.0e38f;
            for (int64_t t = 0; t < len; t++) {
                const float *kp = kh + (tab[t / block_size] * block_size + t % block_size) * d;
                for (int64_t i = 0; i < g; i++) {
                    float x = dot(q + r * q_row + (h * g + i) * q_head, kp, d) * scale;
                    s[i * len + t] = x;
                    mx[i] = x > mx[i] ? x : mx[i];
                }
            }
            for (int64_t i = 0; i < g; i++) {
                float *si = s + i * len, m = mx[i], sum = 0.f;
                for (int64_t t = 0; t < len; t++) {
                    float e = expf(si[t] - m);
                    si[t] = e;
                    sum += e;
                }
                inv[i] = 1.f / sum;
            }
            memset(acc, 0, sizeof(float) * (size_t)(g * d));
            for (int64_t t = 0; t < len; t++) {
                const float *vp = vh + (tab[t / block_size] * block_size + t % block_size) * d;
                for (int64_t i = 0; i < g; i++) {
                    float p = s[i * len + t], *a = acc + i * d;
                    for (int64_t j = 0; j < d; j++) a[j] += p * vp[j];
                }
            }
            for (int64_t i = 0; i < g; i++) {
                float *o = out + r * o_row + (h * g + i) * o_head;
                for (int64_t j = 0; j < d; j++) o[j] = acc[i * d + j] * inv[i];
            }
        }
    }
    free(s);
    free(acc);
    return 0;
}

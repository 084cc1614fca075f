/* Decode attention read in place from the paged KV pool (paged.py): one query token per row, fp32.
 *
 * For each row r and KV head h, the row's keys are read block by block through its block table, scored against
 * the g = heads / kv_heads query heads that share them (GQA), softmaxed, and its values summed: each K/V row of
 * the pool is read once per step and layer, nothing is gathered into a padded batch. Rows may be split over
 * threads (each row is computed the same way whatever the split). Built once per machine by decode_kernel.py and
 * called through ctypes (which drops the GIL, so thread replicas run it side by side).
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LEGORL_AVX2 1
#endif

#define MAXG 32
#define MAXD 512

static inline float dot(const float *restrict a, const float *restrict b, int64_t d) {
    float acc = 0.f;
    for (int64_t j = 0; j < d; j++) acc += a[j] * b[j];
    return acc;
}

#ifdef LEGORL_AVX2
static inline float hsum(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* e^x for x <= 0 (scores minus their max), 8 at a time: 2^n * p(r), a degree-6 polynomial on r in [-ln2/2, ln2/2]
 * (Cephes' coefficients, ~1 ulp); below -87 it flushes to 0 as expf would underflow. */
static inline __m256 exp_nonpos(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_max_ps(x, lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static inline void prefetch_block(const float *p, int64_t floats) {
    for (int64_t c = 0; c < floats; c += 16) _mm_prefetch((const char *)(p + c), _MM_HINT_T0);
}

/* One row and KV head with d a multiple of 8 and at most MAXV * 8: the g query heads' scores block by block (the
 * next block of keys prefetched: blocks are scattered pages, where the hardware prefetcher stops), a vectorised
 * softmax, then each head's values summed in registers. */
#define MAXV 16
static inline __attribute__((always_inline)) void head_avx(const float *const *qs, const float *kh, const float *vh,
                                                         const int64_t *tab, int64_t len, int64_t g, int64_t d,
                                                         int64_t bs, float scale, float *s, float *const *outs) {
    int64_t nb = (len + bs - 1) / bs, w = d / 8;
    float mx[MAXG];
    for (int64_t i = 0; i < g; i++) mx[i] = -3.0e38f;
    if (nb > 1) prefetch_block(kh + tab[1] * bs * d, bs * d);
    for (int64_t b = 0; b < nb; b++) {
        const float *kb = kh + tab[b] * bs * d;
        if (b + 2 < nb) prefetch_block(kh + tab[b + 2] * bs * d, bs * d);
        int64_t n = len - b * bs < bs ? len - b * bs : bs;
        for (int64_t t = 0; t < n; t++) {
            const float *kp = kb + t * d;
            for (int64_t i = 0; i < g; i++) {
                const float *q = qs[i];
                __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
                int64_t c = 0;
                for (; c + 1 < w; c += 2) {
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c), _mm256_loadu_ps(kp + 8 * c), a0);
                    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c + 8), _mm256_loadu_ps(kp + 8 * c + 8), a1);
                }
                if (c < w) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8 * c), _mm256_loadu_ps(kp + 8 * c), a0);
                float x = hsum(_mm256_add_ps(a0, a1)) * scale;
                s[i * len + b * bs + t] = x;
                mx[i] = x > mx[i] ? x : mx[i];
            }
        }
    }
    float inv[MAXG];
    for (int64_t b = 0; b < nb && b < 2; b++) prefetch_block(vh + tab[b] * bs * d, bs * d);
    for (int64_t i = 0; i < g; i++) {
        float *si = s + i * len;
        __m256 m = _mm256_set1_ps(mx[i]), sum = _mm256_setzero_ps();
        int64_t t = 0;
        for (; t + 8 <= len; t += 8) {
            __m256 e = exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(si + t), m));
            _mm256_storeu_ps(si + t, e);
            sum = _mm256_add_ps(sum, e);
        }
        float tail = 0.f;
        for (; t < len; t++) {
            float e = expf(si[t] - mx[i]);
            si[t] = e;
            tail += e;
        }
        inv[i] = 1.f / (hsum(sum) + tail);
    }
    for (int64_t i = 0; i < g; i++) {
        const float *si = s + i * len;
        __m256 acc[MAXV];
        for (int64_t c = 0; c < w; c++) acc[c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const float *vb = vh + tab[b] * bs * d;
            if (i == 0 && b + 2 < nb) prefetch_block(vh + tab[b + 2] * bs * d, bs * d);
            int64_t n = len - b * bs < bs ? len - b * bs : bs;
            for (int64_t t = 0; t < n; t++) {
                __m256 p = _mm256_set1_ps(si[b * bs + t]);
                const float *vp = vb + t * d;
                for (int64_t c = 0; c < w; c++) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vp + 8 * c), acc[c]);
            }
        }
        __m256 sc = _mm256_set1_ps(inv[i]);
        for (int64_t c = 0; c < w; c++) _mm256_storeu_ps(outs[i] + 8 * c, _mm256_mul_ps(acc[c], sc));
    }
}
#endif

typedef struct {
    const float *q, *k, *v;
    const int64_t *tables, *lens;
    float *out;
    int64_t q_row, q_head, slots, width, heads, kv_heads, d, block_size, o_row, o_head, r0, r1;
    float scale;
    int rc;
} Job;

/* Rows [r0, r1) of a job: 0, or 2 (out of memory). */
static int rows(const Job *j) {
    const float *restrict q = j->q, *restrict k = j->k, *restrict v = j->v;
    float *restrict out = j->out;
    int64_t g = j->heads / j->kv_heads, d = j->d, bs = j->block_size, longest = 1;
    for (int64_t r = j->r0; r < j->r1; r++) longest = j->lens[r] > longest ? j->lens[r] : longest;
    float *s = malloc(sizeof(float) * (size_t)(g * longest));
    float *acc = malloc(sizeof(float) * (size_t)(g * d));
    if (!s || !acc) {
        free(s);
        free(acc);
        return 2;
    }
    for (int64_t r = j->r0; r < j->r1; r++) {
        int64_t len = j->lens[r];
        const int64_t *tab = j->tables + r * j->width;
        for (int64_t h = 0; h < j->kv_heads; h++) {
            const float *kh = k + h * j->slots * d, *vh = v + h * j->slots * d;
#ifdef LEGORL_AVX2
            if (d % 8 == 0 && d <= 8 * MAXV) {
                const float *qs[MAXG];
                float *outs[MAXG];
                for (int64_t i = 0; i < g; i++) {
                    qs[i] = q + r * j->q_row + (h * g + i) * j->q_head;
                    outs[i] = out + r * j->o_row + (h * g + i) * j->o_head;
                }
                if (d == 64)
                    head_avx(qs, kh, vh, tab, len, g, 64, bs, j->scale, s, outs);
                else
                    head_avx(qs, kh, vh, tab, len, g, d, bs, j->scale, s, outs);
                continue;
            }
#endif
            float mx[MAXG], inv[MAXG];
            for (int64_t i = 0; i < g; i++) mx[i] = -3.0e38f;
            for (int64_t t = 0; t < len; t++) {
                const float *kp = kh + (tab[t / bs] * bs + t % bs) * d;
                for (int64_t i = 0; i < g; i++) {
                    float x = dot(q + r * j->q_row + (h * g + i) * j->q_head, kp, d) * j->scale;
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
                const float *vp = vh + (tab[t / bs] * bs + t % bs) * d;
                for (int64_t i = 0; i < g; i++) {
                    float p = s[i * len + t], *a = acc + i * d;
                    for (int64_t jj = 0; jj < d; jj++) a[jj] += p * vp[jj];
                }
            }
            for (int64_t i = 0; i < g; i++) {
                float *o = out + r * j->o_row + (h * g + i) * j->o_head;
                for (int64_t jj = 0; jj < d; jj++) o[jj] = acc[i * d + jj] * inv[i];
            }
        }
    }
    free(s);
    free(acc);
    return 0;
}

static void *run_job(void *arg) {
    Job *j = arg;
    j->rc = rows(j);
    return NULL;
}

#define MAXT 64

/* q[r, qh, :] lives at q + r * q_row + qh * q_head; out[r, qh, :] at out + r * o_row + qh * o_head.
 * k, v: one layer's pool [kv_heads, slots, d]. tables: [nd, width] block ids; lens: [nd] context lengths.
 * The rows are split over up to `threads` threads in runs of about equal context.
 * Returns 0, or 1 (shape out of range), or 2 (out of memory). A thread that cannot start leaves its rows to this one. */
int legorl_paged_decode(const float *q, int64_t q_row, int64_t q_head, const float *k, const float *v, int64_t slots,
                        const int64_t *tables, const int64_t *lens, int64_t nd, int64_t width, int64_t heads,
                        int64_t kv_heads, int64_t d, int64_t block_size, float scale, float *out, int64_t o_row,
                        int64_t o_head, int64_t threads) {
    if (kv_heads < 1 || heads % kv_heads || heads / kv_heads > MAXG || d > MAXD) return 1;
    int64_t total = 0;
    for (int64_t r = 0; r < nd; r++) {
        if (lens[r] < 1 || lens[r] > width * block_size) return 1;
        total += lens[r];
    }
    Job base = {q, k, v, tables, lens, out, q_row, q_head, slots, width, heads, kv_heads, d, block_size, o_row,
                o_head, 0, nd, scale, 0};
    int64_t n = threads < nd ? threads : nd;
    n = n > MAXT ? MAXT : n;
    if (n <= 1) return rows(&base);
    Job jobs[MAXT];
    pthread_t tid[MAXT];
    int started[MAXT] = {0};
    int64_t r = 0, seen = 0;
    for (int64_t i = 0; i < n; i++) { /* job i ends where the context seen reaches (i + 1) / n of the total */
        jobs[i] = base;
        jobs[i].r0 = r;
        while (r < nd && (i == n - 1 || seen + lens[r] <= total * (i + 1) / n || r == jobs[i].r0)) seen += lens[r++];
        jobs[i].r1 = r;
    }
    for (int64_t i = 1; i < n; i++) started[i] = jobs[i].r0 < jobs[i].r1 && !pthread_create(&tid[i], NULL, run_job, &jobs[i]);
    run_job(&jobs[0]);
    int rc = jobs[0].rc;
    for (int64_t i = 1; i < n; i++) {
        if (started[i]) {
            pthread_join(tid[i], NULL);
            rc = rc ? rc : jobs[i].rc;
        } else if (jobs[i].r0 < jobs[i].r1) {
            run_job(&jobs[i]); /* could not start a thread: do its rows here */
            rc = rc ? rc : jobs[i].rc;
        }
    }
    return rc;
}

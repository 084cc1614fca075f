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

#define MAXG 32
#define MAXD 512

static inline float dot(const float *restrict a, const float *restrict b, int64_t d) {
    float acc = 0.f;
    for (int64_t j = 0; j < d; j++) acc += a[j] * b[j];
    return acc;
}

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

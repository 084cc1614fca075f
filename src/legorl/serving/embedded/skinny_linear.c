/* y[M, N] = x[M, K] w[N, K]^T in fp32 for the few rows of a decode step (M <= ~16), one thread.
 *
 * A decode step multiplies ~10-16 token rows by every weight matrix of the model: each weight is read from memory
 * once and used M times. BLAS runs these shapes at ~half the core's FMA rate (on 2-core AMD EPYC boxes: ~45 GFLOP/s
 * at M = 14 against ~90 for large GEMMs), as its loads of the next weights wait behind the arithmetic on the current
 * ones. Here three weight rows at a time are dotted with four x rows at a time (12 AVX2 accumulators), and while
 * they are, the weight rows two blocks ahead are prefetched into L2, so streaming the weights overlaps the
 * arithmetic. Each y element is one dot product in a fixed order, whatever M (bench/skinny_linear.py).
 * Built with the decode kernel (decode_kernel.py); without AVX2 + FMA, legorl_skinny_linear_available() is 0.
 */
#include <stdint.h>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define AHEAD 2 /* weight blocks prefetched ahead */

/* Horizontal sums, all in one order, ((v0+v1)+(v2+v3)) + ((v4+v5)+(v6+v7)), so that a y element's bits do not
 * depend on which path (4, 2 or 1 x rows) computed it. Eight or four at once cost about what one does alone. */
static inline float hsum(__m256 v) {
    v = _mm256_hadd_ps(v, v);
    v = _mm256_hadd_ps(v, v);
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

static inline __m256 hsum8(__m256 v0, __m256 v1, __m256 v2, __m256 v3, __m256 v4, __m256 v5, __m256 v6, __m256 v7) {
    __m256 lo = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3)); /* [v0..v3 low | v0..v3 high] */
    __m256 hi = _mm256_hadd_ps(_mm256_hadd_ps(v4, v5), _mm256_hadd_ps(v6, v7));
    return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}

static inline __m128 hsum4(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
    __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

/* two cache lines of the block AHEAD blocks on, per call, until all of its lines are asked for */
#define PREFETCH()                                                        \
    if (pl < nl) {                                                        \
        _mm_prefetch(ahead + 64 * (size_t)pl, _MM_HINT_T1);               \
        _mm_prefetch(ahead + 64 * (size_t)pl + 64, _MM_HINT_T1);          \
        pl += 2;                                                          \
    }

int legorl_skinny_linear_available(void) { return 1; }

/* K % 8 == 0; x, w, y contiguous. Returns 0. */
int legorl_skinny_linear(const float *x, const float *w, float *y, int64_t M, int64_t N, int64_t K) {
    const int64_t nl = (3 * K) / 16; /* cache lines of a block of three weight rows */
    int64_t n = 0;
    for (; n + 3 <= N; n += 3) {
        const float *w0 = w + n * K, *w1 = w0 + K, *w2 = w1 + K;
        const char *ahead = (const char *)(w0 + AHEAD * 3 * K);
        int64_t pl = n + 3 * (AHEAD + 1) <= N ? 0 : nl;
        int64_t m = 0;
        for (; m + 4 <= M; m += 4) {
            const float *x0 = x + m * K, *x1 = x0 + K, *x2 = x1 + K, *x3 = x2 + K;
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00;
            __m256 a20 = a00, a21 = a00, a22 = a00, a30 = a00, a31 = a00, a32 = a00;
            for (int64_t k = 0; k < K; k += 8) {
                PREFETCH();
                __m256 b0 = _mm256_loadu_ps(w0 + k), b1 = _mm256_loadu_ps(w1 + k), b2 = _mm256_loadu_ps(w2 + k), a;
                a = _mm256_loadu_ps(x0 + k);
                a00 = _mm256_fmadd_ps(a, b0, a00); a01 = _mm256_fmadd_ps(a, b1, a01); a02 = _mm256_fmadd_ps(a, b2, a02);
                a = _mm256_loadu_ps(x1 + k);
                a10 = _mm256_fmadd_ps(a, b0, a10); a11 = _mm256_fmadd_ps(a, b1, a11); a12 = _mm256_fmadd_ps(a, b2, a12);
                a = _mm256_loadu_ps(x2 + k);
                a20 = _mm256_fmadd_ps(a, b0, a20); a21 = _mm256_fmadd_ps(a, b1, a21); a22 = _mm256_fmadd_ps(a, b2, a22);
                a = _mm256_loadu_ps(x3 + k);
                a30 = _mm256_fmadd_ps(a, b0, a30); a31 = _mm256_fmadd_ps(a, b1, a31); a32 = _mm256_fmadd_ps(a, b2, a32);
            }
            float s[12], *o = y + m * N + n;
            _mm256_storeu_ps(s, hsum8(a00, a01, a02, a10, a11, a12, a20, a21));
            _mm_storeu_ps(s + 8, hsum4(a22, a30, a31, a32));
            for (int r = 0; r < 4; r++, o += N) { o[0] = s[3 * r]; o[1] = s[3 * r + 1]; o[2] = s[3 * r + 2]; }
        }
        for (; m + 2 <= M; m += 2) {
            const float *x0 = x + m * K, *x1 = x0 + K;
            __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00;
            for (int64_t k = 0; k < K; k += 8) {
                PREFETCH();
                __m256 b0 = _mm256_loadu_ps(w0 + k), b1 = _mm256_loadu_ps(w1 + k), b2 = _mm256_loadu_ps(w2 + k), a;
                a = _mm256_loadu_ps(x0 + k);
                a00 = _mm256_fmadd_ps(a, b0, a00); a01 = _mm256_fmadd_ps(a, b1, a01); a02 = _mm256_fmadd_ps(a, b2, a02);
                a = _mm256_loadu_ps(x1 + k);
                a10 = _mm256_fmadd_ps(a, b0, a10); a11 = _mm256_fmadd_ps(a, b1, a11); a12 = _mm256_fmadd_ps(a, b2, a12);
            }
            float s[8], *o = y + m * N + n;
            __m256 z = _mm256_setzero_ps();
            _mm256_storeu_ps(s, hsum8(a00, a01, a02, a10, a11, a12, z, z));
            o[0] = s[0]; o[1] = s[1]; o[2] = s[2]; o += N;
            o[0] = s[3]; o[1] = s[4]; o[2] = s[5];
        }
        for (; m < M; m++) {
            const float *x0 = x + m * K;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0;
            for (int64_t k = 0; k < K; k += 8) {
                PREFETCH();
                __m256 a = _mm256_loadu_ps(x0 + k);
                a0 = _mm256_fmadd_ps(a, _mm256_loadu_ps(w0 + k), a0);
                a1 = _mm256_fmadd_ps(a, _mm256_loadu_ps(w1 + k), a1);
                a2 = _mm256_fmadd_ps(a, _mm256_loadu_ps(w2 + k), a2);
            }
            float s[4], *o = y + m * N + n;
            _mm_storeu_ps(s, hsum4(a0, a1, a2, _mm256_setzero_ps()));
            o[0] = s[0]; o[1] = s[1]; o[2] = s[2];
        }
    }
    for (; n < N; n++) { /* the last one or two weight rows */
        const float *w0 = w + n * K;
        for (int64_t m = 0; m < M; m++) {
            const float *x0 = x + m * K;
            __m256 a0 = _mm256_setzero_ps();
            for (int64_t k = 0; k < K; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + k), _mm256_loadu_ps(w0 + k), a0);
            y[m * N + n] = hsum(a0);
        }
    }
    return 0;
}

#else

int legorl_skinny_linear_available(void) { return 0; }

int legorl_skinny_linear(const float *x, const float *w, float *y, int64_t M, int64_t N, int64_t K) {
    (void)x; (void)w; (void)y; (void)M; (void)N; (void)K;
    return 1;
}

#endif

/* EM routing of one capsule layer on a CPU, each vote made where it is used: a reading (no gradients) in one call,
   an iteration one pass over the votes (em_route); a training step's passes (em_moments, em_estep, em_vote_grad,
   em_back_mstep, em_fit, em_back_fit, at the end of this file), around which capsnet/nn/em_native_training.py writes
   the rest.

Hinton, Sabour & Frosst (2018), "Matrix capsules with EM routing", ICLR: Procedure 1 as capsnet/nn/em_routing.py
writes it (its module docstring has the formulas and the pitfalls avoided), for a reading on a CPU. The PyTorch
path writes every vote V_ij and [V - c, (V - c)^2] to memory (29.5 MB an image in the paper's ConvCaps1) and reads
them back for each M-step and each E-step. Here a child's votes for every parent type are remade from its pose and
the 4x4 matrices W (four fused multiply-adds an entry) when a pass reaches it, and the E-step of iteration t and the
M-step of iteration t + 1 are one pass: the children are visited one at a time, each child's votes at every parent
position that reaches it made once, its assignments R_ij normalised over all of them (pitfall 1) and added into
those parents' moments at once. An image's routing then touches its children's poses, the matrices W and its
parents' moments, never a vote-sized array. Compiled at run time for the machine as part of em_kernel.cpp (its
typed entries, built by torch.utils.cpp_extension for capsnet/nn/em_native.py), which falls back to the PyTorch path
(the reference the tests hold this to) where no C++ compiler is found.

For speed, the passes hold a slot's 16 entries of W for a block of VB parent types in vector registers (GCC's and
Clang's vector extension, loops over the pose unrolled), so that a vote entry is four fused multiply-adds and its
uses, with no reload of W or copy of the pose: VB is 16 (one AVX-512 register) where the CPU has AVX-512 and 8
(one AVX2 register, two SSE ones) elsewhere, where 16 registers are all there are.

Layouts (float32, contiguous; the batch's images one after another):
    grid     (B, 4, C, 4)     each child's pose M by rows: row r of child n at [b][r][n][:]
    child    (P, I)           the child in each slot
    acts     (B, P, I)        each slot's child activation a_i
    wtiles   (I, 4, 4, Jp)    W_ij[k][c] at [i][k][c][j]; J parent types padded with zeros to Jp, a multiple of
                              em_block(), so that every inner loop is whole vectors
    offsets  (I, 16)          added to every vote of slot i (the class capsules' coordinate addition), or NULL
    centre   (B, P, 16, Jp)   each parent's centre c: the plain mean of its votes (made by the caller: a
                              convolution or a matrix product), about which the moments are taken so that sigma^2
                              does not cancel away
    slots    (C, S)           the slots (p * I + i) of each child, -1 past its last: a child is normalised over
                              every parent position that reaches it
    start    (B, P, I, Jp)    the first R_ij, or NULL: each slot's `even` share (P, I) for every parent type
    beta_u, beta_a (Jp)       each parent type's costs
    out_mean (R, B, P, J, 16) and out_act (R, B, P, J): the parents after the last M-step (R = 1), or after each
                              (R = iterations) when `every` is set
*/

#pragma GCC diagnostic ignored "-Wpsabi" /* vf passed between static functions, never across the ABI */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define H 16                 /* a pose's entries */
#if defined(__AVX512F__)
#define VB 16 /* parent types a block: one vector register, the length of every inner loop */
#else
#define VB 8 /* AVX2's (two of SSE's): a slot's 16 W entries a block then fill its 16 registers at most */
#endif
/* The slots em_vote_grad takes at every parent position before the next ones: 64 slots' W and dL/dW tiles (128 KB
   each for 32 types) stay in a core's L2 across positions, where ConvCaps1's whole (590 KB each) came from L3 */
#define SLOT_BLOCK 64
/* The slots of one position em_moments makes the votes of at a time, adding them into the position's sums with one
   read and one write */
#define MOMENT_SLOTS 4
#define EPSILON 1e-8f        /* em_routing.EPSILON */
#define VARIANCE_FLOOR 1e-4f /* em_routing.VARIANCE_FLOOR */
#define TWO_PI 6.283185307179586f

/* exp(x) for x <= 0 (x >= -87 after the clamp): Cephes' polynomial after x = n ln 2 + f, about 1e-7 relative;
   written so that a loop over it vectorises, where libm's expf is a call a number */
static inline float exp_neg(float x) {
    x = x < -87.0f ? -87.0f : x;
    const float n = floorf(x * 1.44269504088896341f + 0.5f);
    const float f = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * f + 1.3981999507e-3f;
    p = p * f + 8.3334519073e-3f;
    p = p * f + 4.1665795894e-2f;
    p = p * f + 1.6666665459e-1f;
    p = p * f + 5.0000001201e-1f;
    p = p * f * f + f + 1.0f;
    const int32_t bits = ((int32_t)n + 127) << 23; /* 2^n, n in [-126, 0] */
    float scale;
    memcpy(&scale, &bits, sizeof scale); /* a bit cast the vectoriser sees through, where a union is not */
    return p * scale;
}

/* VB floats as one vector of GCC's and Clang's vector extension (one AVX-512 register, two AVX2 ones): the passes
   that hold a slot's 16 W entries in registers are written with it; loads and stores through memcpy, unaligned */
typedef float vf __attribute__((vector_size(VB * sizeof(float))));
static inline vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void vstore(float *p, vf v) { memcpy(p, &v, sizeof v); }
typedef int32_t vi __attribute__((vector_size(VB * sizeof(int32_t)))); /* a comparison's lanes, and shuffles' */

/* A slot's W entries for a block of VB parent types in registers: wt[k * 4 + c] = W[k][c] */
static inline void load_tile(vf *wt, const float *w, int64_t Jp, int64_t jb) {
#pragma GCC unroll 16
    for (int n = 0; n < H; n++) wt[n] = vload(w + n * Jp + jb);
}

/* Entry l = (row, col) of a slot's vote about its parents' centres c (VB types): the child's pose row `m` (4 floats in
   the grid) times W[:, col], plus the offset o where there are offsets, minus c: four fused multiply-adds where there
   are none (a convolutional layer). Inlined into loops unrolled over l, so that the tile stays in registers. */
static inline __attribute__((always_inline)) vf vote_of(const vf *wt, const float *m, int l, const float *off,
                                                        const float *c) {
    const int col = l & 3;
    const vf shift = off ? off[l] - vload(c) : -vload(c);
    return m[0] * wt[col] + shift + m[1] * wt[4 + col] + m[2] * wt[8 + col] + m[3] * wt[12 + col];
}

/* sum_l d_l (q1_l + d_l q2_l) over a slot's 16 vote entries d about the centre c (16 rows of Jp), for VB types: [V',
   V'^2] . q with q1 and q2 a parent's vectors (16 rows of Jp each: the E-step's distance, an M-step backward's g_w),
   each d kept in v (16 rows of Jp) where v is given */
static inline __attribute__((always_inline)) vf weighed_votes(const vf *wt, const float *const rows[4],
                                                              const float *off, const float *c, const float *q1,
                                                              const float *q2, int64_t Jp, float *v) {
    vf acc[4] = {{0}, {0}, {0}, {0}}; /* four sums, so that no chain of 16 dependent multiply-adds waits on itself */
#pragma GCC unroll 16
    for (int l = 0; l < H; l++) {
        const vf d = vote_of(wt, rows[l >> 2], l, off, c + l * Jp);
        if (v) vstore(v + l * Jp, d);
        acc[l & 3] += d * (vload(q1 + l * Jp) + d * vload(q2 + l * Jp));
    }
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* log a_j + log N(V_ij; mu_j, sigma_j^2) for a slot's VB types into logp, its votes about the centre kept in v (16
   rows of Jp), the largest so far lane by lane in *top (lane_max finds the child's): constant k (VB) minus half the
   votes weighed by q1, q2 (weighed_votes) */
static inline __attribute__((always_inline)) void log_density(const vf *wt, const float *const rows[4],
                                                              const float *off, const float *c, const float *q1,
                                                              const float *q2, const float *k, int64_t Jp, float *v,
                                                              float *logp, vf *top) {
    const vf x = vload(k) - 0.5f * weighed_votes(wt, rows, off, c, q1, q2, Jp, v);
    vstore(logp, x);
    const vi above = x > *top; /* lane by lane: no chain of VB scalar comparisons a vote */
    *top = (vf)(((vi)x & above) | ((vi)*top & ~above));
}

/* The largest of a vector's lanes */
static inline float lane_max(vf v) {
    float top = v[0];
    for (int jj = 1; jj < VB; jj++) top = v[jj] > top ? v[jj] : top;
    return top;
}

/* A child's assignments over its n slot-types from their log-densities r (top the largest), in place: weights
   exp(r - top), each floored at `log_floor` below the likeliest (LOG_WEIGHT_FLOOR), 0 for a padded type (-inf).
   Returns their sum, by which the caller normalises. */
static inline float child_weights(float *r, int64_t n, float top, float log_floor) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t at = 0; at < n; at++) {
        const float x = r[at] - top;
        r[at] = x == -INFINITY ? 0.0f : exp_neg(x > log_floor ? x : log_floor);
        sum += r[at];
    }
    return sum;
}

/* NS slots of one position (NS = 1..MOMENT_SLOTS) into its moments: each slot's weights given[u] times a[u], their
   sum into amount (where given) and times the slots' votes about the centre c and their squares into f and s (all
   16 rows of Jp). The votes are made a column of W at a time (four of a slot's 16 W entries live, not its whole
   tile), so that the position's sums are read and written once for the NS slots, in the order one
   slot at a time would add them. */
static inline __attribute__((always_inline)) void moments_slots(const int NS, const int64_t Jp, const int with,
                                                                 const float *const *w, const float *const (*m)[4],
                                                                 const float *const *off, const float *const *given,
                                                                 const float *a, const float *c, float *amount,
                                                                 float *f, float *s) {
    for (int64_t jb = 0; jb < Jp; jb += VB) {
        vf r[MOMENT_SLOTS], n = amount ? vload(amount + jb) : (vf){0};
#pragma GCC unroll 4
        for (int u = 0; u < NS; u++) {
            r[u] = vload(given[u] + jb) * a[u];
            n += r[u];
        }
        if (amount) vstore(amount + jb, n);
#pragma GCC unroll 4
        for (int col = 0; col < 4; col++) {
            vf wc[MOMENT_SLOTS][4]; /* W[k][col] of each slot */
#pragma GCC unroll 4
            for (int u = 0; u < NS; u++)
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) wc[u][k] = vload(w[u] + (k * 4 + col) * Jp + jb);
#pragma GCC unroll 4
            for (int row = 0; row < 4; row++) {
                const int l = row * 4 + col;
                const vf centre = vload(c + l * Jp + jb);
                vf first = vload(f + l * Jp + jb), second = vload(s + l * Jp + jb);
#pragma GCC unroll 4
                for (int u = 0; u < NS; u++) {
                    const float *mr = m[u][row];
                    const vf shift = with ? off[u][l] - centre : -centre;
                    const vf d = mr[0] * wc[u][0] + shift + mr[1] * wc[u][1] + mr[2] * wc[u][2] + mr[3] * wc[u][3];
                    const vf rd = r[u] * d;
                    first += rd;
                    second += rd * d;
                }
                vstore(f + l * Jp + jb, first);
                vstore(s + l * Jp + jb, second);
            }
        }
    }
}

typedef struct {
    int64_t P, I, J, Jp, C, S;
    const float *wtiles, *offsets, *beta_u, *beta_a;
    const int64_t *slots, *child;
    float scale; /* pitfall 3: n_j scaled by parents / children of a receptive field */
} Layer;

/* The pose rows of the child in slot `slot` of an image's grid (4, C, 4): row r at rows[r] */
static inline void pose_rows(const Layer *L, const float *grid, int64_t slot, const float *rows[4]) {
    const int64_t n = L->child[slot];
    for (int r = 0; r < 4; r++) rows[r] = grid + (r * L->C + n) * 4;
}

/* What one M-step adds up for every parent (about its centre), and the fit it gives. (P, 16, Jp) or (P, Jp). */
typedef struct {
    float *first, *second, *amount;    /* sum_i r (V - c), sum_i r (V - c)^2, n = sum_i r, with r = R a */
    float *mean, *variance, *logit;    /* d = mu - c, sigma^2, the activation's logit z */
    float *q1, *q2, *constant;         /* the next E-step's weights: -2 d / sigma^2, 1 / sigma^2, log a - k / 2 */
} Fit;

/* Adds r (Jp) times the votes about the centre v (16 rows of Jp) into a parent position's sums: n (Jp) += r, f (16
   rows of Jp) += r v, s += r v^2 */
static inline __attribute__((always_inline)) void add_weighed(const float *restrict v, const float *restrict r,
                                                              float *n, float *f, float *s, int64_t Jp) {
    for (int64_t jb = 0; jb < Jp; jb += VB) {
        const vf rj = vload(r + jb);
        vstore(n + jb, vload(n + jb) + rj);
#pragma GCC unroll 16
        for (int l = 0; l < H; l++) {
            const vf d = vload(v + l * Jp + jb), rd = rj * d;
            vstore(f + l * Jp + jb, vload(f + l * Jp + jb) + rd);
            vstore(s + l * Jp + jb, vload(s + l * Jp + jb) + rd * d);
        }
    }
}

/* Adds two children's r times their votes about the centre into the same parent position's sums: add_weighed for
   both with one read and one write of the sums */
static inline __attribute__((always_inline)) void add_weighed_two(const float *restrict v, const float *restrict r,
                                                                   const float *restrict u, const float *restrict q,
                                                                   float *n, float *f, float *s, int64_t Jp) {
    for (int64_t jb = 0; jb < Jp; jb += VB) {
        const vf rj = vload(r + jb), qj = vload(q + jb);
        vstore(n + jb, vload(n + jb) + (rj + qj));
#pragma GCC unroll 16
        for (int l = 0; l < H; l++) {
            const vf d = vload(v + l * Jp + jb), e = vload(u + l * Jp + jb), rd = rj * d, qe = qj * e;
            vstore(f + l * Jp + jb, vload(f + l * Jp + jb) + (rd + qe));
            vstore(s + l * Jp + jb, vload(s + l * Jp + jb) + (rd * d + qe * e));
        }
    }
}

/* Whether child `ch + 1`'s slots are at child ch's parent positions, one for one (two types of one cell, as the
   children are visited cell by cell), so that em_estep adds both into those parents' sums at once */
static inline int next_child_alongside(const int64_t *slots, int64_t S, int64_t I, int64_t ch, int64_t C,
                                       int64_t count) {
    if (ch + 1 >= C) return 0;
    const int64_t *own = slots + ch * S, *next = own + S;
    for (int64_t n = 0; n < S; n++)
        if ((n < count) != (next[n] >= 0) || (n < count && next[n] / I != own[n] / I)) return 0;
    return 1;
}

static void clear_sums(const Layer *L, Fit *F) {
    memset(F->first, 0, sizeof(float) * L->P * H * L->Jp);
    memset(F->second, 0, sizeof(float) * L->P * H * L->Jp);
    memset(F->amount, 0, sizeof(float) * L->P * L->Jp);
}

/* The fit at the end of an M-step (as capsnet.nn.em_routing._m_step) of one position's Jp parents, type by type in
   the inner loops (whole vectors), from their sums first = sum_i r V' and second = sum_i r V'^2 (16 rows of Jp) and
   n = sum_i r (Jp): their means about the centre d, variances sigma^2 (and where `positive` is given, whether the
   spread was above 0), and activation logits z; where q1 is given, the next E-step's weights q1 = -2 d / sigma^2,
   q2 = 1 / sigma^2 and constant log a - k / 2 (-inf for a padded type, past the J real ones). */
static void fit_position(const float *first, const float *second, const float *amount, const float *centre,
                         const float *beta_u, const float *beta_a, float scale, float lam, int64_t J, int64_t Jp,
                         float *mean, float *variance, uint8_t *positive, float *q1, float *q2, float *logit,
                         float *constant) {
    float inv[Jp], total[Jp], k[Jp];
    double volume[Jp]; /* prod_h sigma_h^2, whose one log is sum_h log sigma_h^2 (within 1e-64..1e300 in a double) */
    for (int64_t j = 0; j < Jp; j++) {
        inv[j] = 1.0f / (amount[j] + EPSILON);
        total[j] = amount[j] * inv[j];
        k[j] = 0.0f;
        volume[j] = 1.0;
    }
    for (int l = 0; l < H; l++) {
        const int64_t row = l * Jp;
#pragma omp simd
        for (int64_t j = 0; j < Jp; j++) {
            const float f = first[row + j] * inv[j], s = second[row + j] * inv[j];
            const float d = f - centre[row + j] * (1.0f - total[j]); /* mu - c, with mu = sum_i w_i V_i */
            const float spread = s - d * (2.0f * f - d * total[j]);
            const float var = (spread > 0.0f ? spread : 0.0f) + VARIANCE_FLOOR, prec = 1.0f / var;
            mean[row + j] = d;
            variance[row + j] = var;
            if (positive) positive[row + j] = spread > 0.0f;
            volume[j] *= var;
            if (q1) { /* about the centre: sum_h (V - mu)^2 / sigma^2 = sum_h (V' - d)^2 / sigma^2, V' = V - c */
                q1[row + j] = -2.0f * d * prec;
                q2[row + j] = prec;
                k[j] += d * d * prec;
            }
        }
    }
    for (int64_t j = 0; j < Jp; j++) {
        const float log_volume = (float)log(volume[j]);                               /* one log a parent */
        const float cost = (H * beta_u[j] + 0.5f * log_volume) * (amount[j] * scale); /* sum_h (beta_u + log sigma) n */
        const float z = lam * (beta_a[j] - cost);
        logit[j] = z;
        if (q1) {
            const float log_a = z < 0.0f ? z - log1pf(expf(z)) : -log1pf(expf(-z)); /* logsigmoid, exact near 0 */
            const float spread = k[j] + H * logf(TWO_PI) + log_volume;               /* + sum_h log(2 pi sigma_h^2) */
            constant[j] = j < J ? log_a - 0.5f * spread : -INFINITY;                /* a padded type gets nothing */
        }
    }
}

/* The end of an M-step for every parent of an image, and the next E-step's weights. */
static void fit_parents(const Layer *L, Fit *F, const float *centre, float lam) {
    const int64_t Jp = L->Jp;
    for (int64_t p = 0; p < L->P; p++) {
        const int64_t rows = p * H * Jp, at = p * Jp;
        fit_position(F->first + rows, F->second + rows, F->amount + at, centre + rows, L->beta_u, L->beta_a, L->scale,
                     lam, L->J, Jp, F->mean + rows, F->variance + rows, NULL, F->q1 + rows, F->q2 + rows,
                     F->logit + at, F->constant + at);
    }
}

/* The first M-step's sums, from R given (P, I, Jp) or each slot's even share: each vote made and added at once */
static inline __attribute__((always_inline)) void first_pass(const Layer *L, const int64_t Jp, const int with, Fit *F,
                                                              const float *poses, const float *acts,
                                                              const float *centre, const float *start,
                                                              const float *even) {
    clear_sums(L, F);
    float real[Jp]; /* the even start's weights are even a for each real type, 0 for a padded one */
    for (int64_t j = 0; j < Jp; j++) real[j] = j < L->J ? 1.0f : 0.0f;
    for (int64_t p = 0; p < L->P; p++) {
        const float *w[MOMENT_SLOTS], *m[MOMENT_SLOTS][4], *off[MOMENT_SLOTS], *given[MOMENT_SLOTS];
        float a[MOMENT_SLOTS];
        const float *c = centre + p * H * Jp;
        float *n = F->amount + p * Jp, *f = F->first + p * H * Jp, *s = F->second + p * H * Jp;
        int ns = 0;
        for (int64_t i = 0; i < L->I; i++) {
            const int64_t slot = p * L->I + i;
            if (acts[slot] == 0.0f) continue;
            a[ns] = start ? acts[slot] : even[slot] * acts[slot];
            given[ns] = start ? start + slot * Jp : real;
            pose_rows(L, poses, slot, m[ns]);
            w[ns] = L->wtiles + i * H * Jp, off[ns] = with ? L->offsets + i * H : NULL;
            if (++ns == MOMENT_SLOTS) {
                moments_slots(MOMENT_SLOTS, Jp, with, w, m, off, given, a, c, n, f, s);
                ns = 0;
            }
        }
        for (int u = 0; u < ns; u++) /* the last few, one at a time */
            moments_slots(1, Jp, with, w + u, m + u, off + u, given + u, a + u, c, n, f, s);
    }
}

/* Where an image's E-step reads its parents' weights and adds the next M-step's sums: position p's q1 and q2 (16 rows
   of Jp each) at q1 + p * q_stride and q2 + p * q_stride, its constant (Jp) at constant + p * Jp; its sums of r V'
   and r V'^2 (16 rows of Jp each) at first + p * sum_stride and second + p * sum_stride, of r at amount + p * Jp. A
   reading keeps them in its Fit structs, a training step in (B, P, 2, 16, Jp) tensors. */
typedef struct {
    const float *q1, *q2, *constant;
    int64_t q_stride;
    float *first, *second, *amount;
    int64_t sum_stride;
} EStep;

/* One child's E-step (its `count` slots `own` in an image: its grid `poses`, centres, slot activations `acts` (P,
   I)): R_ij = a_j p_ij / sum over every parent of the child (log space, weights floored at `log_floor` below the
   likeliest's: LOG_WEIGHT_FLOOR) into R (P, I, Jp) where R is given, r = R a (count x Jp) and the child's votes
   about the centre v (count x 16 x Jp), for the M-step's sums that estep_children adds */
static inline __attribute__((always_inline)) void child_estep(const Layer *L, const int64_t Jp, const int with,
                                                               const EStep *E, const float *poses,
                                                               const float *centre, const float *acts,
                                                               const int64_t *own, int64_t count, float log_floor,
                                                               float *R, float *r, float *v) {
    vf top = {0};
    top -= INFINITY;
    for (int64_t n = 0; n < count; n++) {
        const int64_t slot = own[n], p = slot / L->I, i = slot % L->I;
        const float *m[4];
        pose_rows(L, poses, slot, m);
        const float *w = L->wtiles + i * H * Jp, *off = with ? L->offsets + i * H : NULL;
        const float *q1 = E->q1 + p * E->q_stride, *q2 = E->q2 + p * E->q_stride, *k = E->constant + p * Jp;
        for (int64_t jb = 0; jb < Jp; jb += VB) {
            vf wt[H];
            load_tile(wt, w, Jp, jb);
            log_density(wt, m, off, centre + p * H * Jp + jb, q1 + jb, q2 + jb, k + jb, Jp, v + n * H * Jp + jb,
                        r + n * Jp + jb, &top);
        }
    }
    const float inv = 1.0f / child_weights(r, count * Jp, lane_max(top), log_floor);
    for (int64_t n = 0; n < count; n++) {
        float *rs = r + n * Jp, *assigned = R ? R + own[n] * Jp : NULL;
        const float a = acts[own[n]];
#pragma omp simd
        for (int64_t j = 0; j < Jp; j++) {
            const float given = rs[j] * inv;
            if (assigned) assigned[j] = given;
            rs[j] = given * a; /* r = R a */
        }
    }
}

/* An image's E-step and the next M-step's sums (zeroed by the caller), one child at a time, or two where the
   second's slots are at the first's parent positions (two types of one cell, as the children are visited cell by
   cell): each of its slots' votes made once, its assignments (child_estep), then r = R a times its votes and their
   squares added into those parents' sums, once for both children of a pair. r and v hold two children's. */
static inline __attribute__((always_inline)) void estep_children(const Layer *L, const int64_t Jp, const int with,
                                                                  const EStep *E, const float *poses,
                                                                  const float *centre, const float *acts,
                                                                  float log_floor, float *R, float *r, float *v) {
    const int64_t S = L->S, I = L->I;
    float *r2 = r + S * Jp, *v2 = v + S * H * Jp; /* the second child's of a pair */
    for (int64_t ch = 0; ch < L->C; ch++) {
        const int64_t *own = L->slots + ch * S;
        int64_t count = 0;
        while (count < S && own[count] >= 0) count++;
        if (count == 0) continue; /* a child no window reaches */
        const int two = next_child_alongside(L->slots, S, I, ch, L->C, count);
        child_estep(L, Jp, with, E, poses, centre, acts, own, count, log_floor, R, r, v);
        if (two) child_estep(L, Jp, with, E, poses, centre, acts, own + S, count, log_floor, R, r2, v2);
        for (int64_t n = 0; n < count; n++) {
            const int64_t p = own[n] / I;
            float *total = E->amount + p * Jp, *first = E->first + p * E->sum_stride;
            float *second = E->second + p * E->sum_stride;
            const int one = acts[own[n]] != 0.0f, other = two && acts[own[S + n]] != 0.0f;
            if (one && other)
                add_weighed_two(v + n * H * Jp, r + n * Jp, v2 + n * H * Jp, r2 + n * Jp, total, first, second, Jp);
            else if (one)
                add_weighed(v + n * H * Jp, r + n * Jp, total, first, second, Jp);
            else if (other)
                add_weighed(v2 + n * H * Jp, r2 + n * Jp, total, first, second, Jp);
        }
        ch += two;
    }
}

/* A reading's E-step of fit F and the sums of the next M-step into G */
static inline __attribute__((always_inline)) void next_pass(const Layer *L, const int64_t Jp, const int with,
                                                             const Fit *F, Fit *G, const float *poses,
                                                             const float *acts, const float *centre, float log_floor,
                                                             float *v, float *r) {
    const EStep E = {F->q1, F->q2, F->constant, H * Jp, G->first, G->second, G->amount, H * Jp};
    clear_sums(L, G);
    estep_children(L, Jp, with, &E, poses, centre, acts, log_floor, NULL, r, v);
}

static void write_out(const Layer *L, const Fit *F, const float *centre, float *out_mean, float *out_act) {
    const int64_t J = L->J, Jp = L->Jp;
    for (int64_t p = 0; p < L->P; p++)
        for (int64_t j = 0; j < J; j++) {
            for (int l = 0; l < H; l++) {
                const int64_t at = (p * H + l) * Jp + j;
                out_mean[(p * J + j) * H + l] = F->mean[at] + centre[at];
            }
            out_act[p * J + j] = 1.0f / (1.0f + expf(-F->logit[p * Jp + j]));
        }
}

/* The images [first, last) of a batch an entry runs: em_kernel.cpp splits a batch into such ranges over torch's own
   threads (at::parallel_for), each range adding into its own copy of a summed output. */
typedef struct {
    int64_t first, last;
} Share;

/* The block the caller pads the parent types to. */
int64_t em_block(void) { return VB; }

/* A pass's body with Jp and whether there are offsets as constants for the layers that take a step's time (32 parent
   types without offsets: the convolutional capsules of the papers' networks), so that each entry's address is a
   fixed distance from its block's (with Jp a variable, the sixteen rows' pointers are kept apart and spill); any
   other layer runs the body with both as variables. One variant more is the whole pass again to compile. */
#define BY_WIDTH(body, L, ...)                                                                                       \
    do {                                                                                                             \
        if ((L)->Jp == 32 && (L)->offsets == NULL) body(L, 32, 0, __VA_ARGS__);                                     \
        else body(L, (L)->Jp, (L)->offsets != NULL, __VA_ARGS__);                                                    \
    } while (0)

/* em_route's images, with Jp and whether there are offsets constants (BY_WIDTH) */
static inline __attribute__((always_inline)) void route_images(const Layer *L, const int64_t Jp, const int with,
                                                                int64_t batch, int64_t first_image,
                                                                int64_t last_image, int64_t iterations, int64_t every,
                                                                const float *poses, const float *acts,
                                                                const float *centre, const float *start,
                                                                const float *even, const float *lambdas,
                                                                float log_floor, float *out_mean, float *out_act,
                                                                Fit *fits, float *v, float *r) {
    const int64_t P = L->P, I = L->I, J = L->J, C = L->C, PI = P * I, PJ = P * Jp;
    for (int64_t b = first_image; b < last_image; b++) {
        const float *img_poses = poses + b * 16 * C, *img_acts = acts + b * PI, *img_centre = centre + b * PJ * H;
        for (int64_t t = 0; t < iterations; t++) {
            Fit *F = &fits[t % 2];
            if (t == 0)
                first_pass(L, Jp, with, F, img_poses, img_acts, img_centre, start ? start + b * PI * Jp : NULL, even);
            else
                next_pass(L, Jp, with, &fits[(t + 1) % 2], F, img_poses, img_acts, img_centre, log_floor, v, r);
            fit_parents(L, F, img_centre, lambdas[t]);
            if (every || t == iterations - 1) {
                const int64_t at_image = every ? t * batch + b : b;
                write_out(L, F, img_centre, out_mean + at_image * P * J * H, out_act + at_image * P * J);
            }
        }
    }
}

/* Routes images [first_image, last_image) of a batch of `batch` (the layouts are at the top of this file). S is
   the most slots a child fills. Returns 0; 1 when its scratch memory could not be had; 2 for a Jp that is not a
   multiple of em_block() or less than J. */
int em_route(int64_t batch, int64_t first_image, int64_t last_image, int64_t P, int64_t I, int64_t J, int64_t Jp,
             int64_t C, int64_t S, int64_t iterations, int64_t every, const float *poses, const float *acts,
             const float *wtiles, const float *offsets, const float *centre, const int64_t *child,
             const int64_t *slots, const float *start, const float *even, const float *beta_u, const float *beta_a, const float *lambdas,
             float scale, float log_floor, float *out_mean, float *out_act) {
    if (Jp % VB != 0 || Jp < J) return 2;
    const int64_t PJ = P * Jp, sums = PJ * H * 2 + PJ, fit = PJ * H * 4 + PJ * 2;
    const size_t floats = 2 * ((size_t)S * H * Jp + (size_t)S * Jp) + 2 * (size_t)(sums + fit); /* two children */
    const Layer L = {P, I, J, Jp, C, S, wtiles, offsets, beta_u, beta_a, slots, child, scale};
    int code = 0;
    {
        const Share share = {first_image, last_image};
        const int some = share.first < share.last; /* a thread with no images takes no scratch */
        float *scratch = some ? (float *)malloc(floats * sizeof(float)) : NULL; /* a thread's own */
        if (some && !scratch) {
            code = 1;
        } else if (some) {
            float *v = scratch, *r = v + 2 * S * H * Jp, *at = r + 2 * S * Jp;
            Fit fits[2];
            for (int n = 0; n < 2; n++) {
                Fit *F = &fits[n];
                F->first = at, F->second = at + PJ * H, F->amount = at + 2 * PJ * H, F->mean = F->amount + PJ;
                F->variance = F->mean + PJ * H, F->q1 = F->variance + PJ * H, F->q2 = F->q1 + PJ * H;
                F->logit = F->q2 + PJ * H, F->constant = F->logit + PJ;
                at = F->constant + PJ;
            }
            BY_WIDTH(route_images, &L, batch, share.first, share.last, iterations, every, poses, acts, centre, start,
                     even, lambdas, log_floor, out_mean, out_act, fits, v, r);
            free(scratch);
        }
    }
    return code;
}

/* ---- The passes a training step's routing is made of (capsnet/nn/em_native.py writes the rest of Procedure 1
   and its backward around them, in PyTorch, on tensors of one number a vote or one vector a parent). ---- */

static Layer pass_layer(int64_t P, int64_t I, int64_t Jp, int64_t C, const int64_t *child, const float *wtiles,
                        const float *offsets) {
    const Layer L = {P, I, Jp, Jp, C, 0, wtiles, offsets, NULL, NULL, NULL, child, 0.0f};
    return L;
}

static inline __attribute__((always_inline)) void moments_images(
    const Layer *L, const int64_t Jp, const int with, int64_t first_image, int64_t last_image, const float *rows,
    const float *centre, float *weights, int64_t weights_stride, const float *scale, const float *assign,
    const float *totals, float *out, float *amount) {
    const int64_t P = L->P, I = L->I, C = L->C;
    for (int64_t b = first_image; b < last_image; b++) {
        float *o = out + b * P * 2 * H * Jp;
        memset(o, 0, sizeof(float) * P * 2 * H * Jp);
        if (amount) memset(amount + b * P * Jp, 0, sizeof(float) * P * Jp);
        for (int64_t p = 0; p < P; p++) {
            const float *c = centre + (b * P + p) * H * Jp;
            float *f = o + p * 2 * H * Jp, *s = f + H * Jp, *n = amount ? amount + (b * P + p) * Jp : NULL;
            const float *w[MOMENT_SLOTS], *m[MOMENT_SLOTS][4], *off[MOMENT_SLOTS], *given[MOMENT_SLOTS];
            float a[MOMENT_SLOTS];
            int ns = 0; /* the slots taken so far, at most MOMENT_SLOTS */
            for (int64_t i = 0; i < I; i++) {
                float *g = weights + b * weights_stride + (p * I + i) * Jp;
                if (totals) { /* the E-step's softmax backward: w = R (g - the child's sum of R g), over g */
                    const float *r = assign + b * weights_stride + (p * I + i) * Jp;
                    const float total = totals[b * C + L->child[p * I + i]];
                    for (int64_t jb = 0; jb < Jp; jb += VB) vstore(g + jb, vload(r + jb) * (vload(g + jb) - total));
                }
                a[ns] = scale ? scale[(b * P + p) * I + i] : 1.0f;
                if (a[ns] == 0.0f) continue;
                pose_rows(L, rows + b * 16 * C, p * I + i, m[ns]);
                w[ns] = L->wtiles + i * H * Jp, off[ns] = with ? L->offsets + i * H : NULL, given[ns] = g;
                if (++ns == MOMENT_SLOTS) {
                    moments_slots(MOMENT_SLOTS, Jp, with, w, m, off, given, a, c, n, f, s);
                    ns = 0;
                }
            }
            for (int u = 0; u < ns; u++) /* the last few, one at a time */
                moments_slots(1, Jp, with, w + u, m + u, off + u, given + u, a + u, c, n, f, s);
        }
    }
}
/* out (B, P, 2, 16, Jp) = sum_i w [V - c, (V - c)^2] with w = weights (B, P, I, Jp; an image's `weights_stride`
   floats after the last's, 0 for one set of weights for every image) times scale (B, P, I) where one is given (the
   M-step's r = R a), and amount (B, P, Jp) = sum_i w where asked for: the M-step's moments. Where totals (B, C) are
   given, the weights are the gradient g = dL/dR a of an E-step's assignments assign (B, P, I, Jp, strided as
   the weights) and totals each child's sum over its slots and types of R g (em_back_mstep's): w is then the
   softmax's backward, g_l = R (g - the child's total), written over g, and its moments are the backward's. */
int em_moments(int64_t first_image, int64_t last_image, int64_t P, int64_t I, int64_t Jp, int64_t C,
               const int64_t *child, const float *rows, const float *wtiles, const float *offsets,
               const float *centre, float *weights, int64_t weights_stride, const float *scale, const float *assign,
               const float *totals, float *out, float *amount) {
    const Layer L = pass_layer(P, I, Jp, C, child, wtiles, offsets);
    {
        const Share share = {first_image, last_image};
        BY_WIDTH(moments_images, &L, share.first, share.last, rows, centre, weights, weights_stride, scale, assign,
                 totals, out, amount);
    }
    return 0;
}

static inline __attribute__((always_inline)) void estep_images(
    const Layer *L, const int64_t Jp, const int with, int64_t first_image, int64_t last_image, const float *rows,
    const float *centre, const float *g, const float *constant, float log_floor, float *R, const float *acts,
    float *out, float *amount, float *r, float *v) {
    const int64_t P = L->P, I = L->I, C = L->C, twice = 2 * H * Jp;
    for (int64_t b = first_image; b < last_image; b++) {
        float *sums = out + b * P * twice;
        const float *q = g + b * P * twice;
        const EStep E = {q, q + H * Jp, constant + b * P * Jp, twice, sums, sums + H * Jp, amount + b * P * Jp, twice};
        memset(sums, 0, sizeof(float) * P * twice);
        memset(E.amount, 0, sizeof(float) * P * Jp);
        estep_children(L, Jp, with, &E, rows + b * 16 * C, centre + b * P * H * Jp, acts + b * P * I, log_floor,
                       R + b * P * I * Jp, r, v);
    }
}

/* The E-step: R (B, P, I, Jp) = a_j p_ij / sum over every parent of child i, from each parent's weights g (B, P, 2,
   16, Jp) = [-2 d / sigma^2, 1 / sigma^2] and constant (B, P, Jp) = log a_j - (sum_h d^2 / sigma^2 + log 2 pi
   sigma^2) / 2 (-inf for a padded type), child by child (`slots`, S a child at most), the weights floored at
   `log_floor` below the child's likeliest parent's; and the next M-step's sums in the same pass, each child's votes
   made once: out (B, P, 2, 16, Jp) = sum_i r [V', V'^2] and amount (B, P, Jp) = sum_i r, with r = R a, a = acts
   (B, P, I) (as em_moments gives them). */
int em_estep(int64_t first_image, int64_t last_image, int64_t P, int64_t I, int64_t Jp, int64_t C,
             const int64_t *child, const float *rows, const float *wtiles, const float *offsets, const float *centre,
             const float *g, const float *constant, const int64_t *slots, int64_t S, float log_floor, float *R,
             const float *acts, float *out, float *amount) {
    Layer L = pass_layer(P, I, Jp, C, child, wtiles, offsets);
    L.slots = slots, L.S = S; /* the children as the E-step visits them */
    int code = 0;
    {
        const Share share = {first_image, last_image};
        const int some = share.first < share.last; /* a thread with no images takes no scratch */
        float *r = some ? (float *)malloc(sizeof(float) * 2 * S * Jp * (H + 1)) : NULL; /* two children's */
        if (some && !r) {
            code = 1;
        } else if (some) {
            float *v = r + 2 * S * Jp; /* each slot's votes about the centre, for the M-step's sums */
            BY_WIDTH(estep_images, &L, share.first, share.last, rows, centre, g, constant, log_floor, R, acts, out,
                     amount, r, v);
            free(r);
        }
    }
    return code;
}

/* One factor of the gradient of [V', V'^2]: a number a vote, left = base (B, P, I, Jp; an image's `stride` floats
   after the last's, 0 for every image alike), times a (B, P, I) and inv (B, P, Jp) where inv is given (an M-step's
   weights w = R a / (n + eps)), and a vector a parent, right (B, P, 2, 16, Jp). */
typedef struct {
    const float *base;
    int64_t stride;
    const float *inv, *right;
} Factor;

/* Two vectors' lanes picked by index (0..VB-1 the first's, VB.. the second's): GCC's and Clang's builtins */
#if defined(__clang__)
#define PICK(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define PICK(a, b, ...) __builtin_shuffle(a, b, (vi){__VA_ARGS__})
#endif

/* Pairs of vectors halved: lane sums of width `w` of a and b, side by side (a's in the lower half of each 2w) */
#if VB == 16
#define HALVE16(a, b) (PICK(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) + \
                       PICK(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31))
#define HALVE8(a, b) (PICK(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27) + \
                      PICK(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31))
#define HALVE4(a, b) (PICK(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29) + \
                      PICK(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31))
#define HALVE2(a, b) (PICK(a, b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30) + \
                      PICK(a, b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31))
#else
#define HALVE4(a, b) (PICK(a, b, 0, 1, 2, 3, 8, 9, 10, 11) + PICK(a, b, 4, 5, 6, 7, 12, 13, 14, 15))
#define HALVE2(a, b) (PICK(a, b, 0, 1, 8, 9, 4, 5, 12, 13) + PICK(a, b, 2, 3, 10, 11, 6, 7, 14, 15))
#define HALVE1(a, b) (PICK(a, b, 0, 8, 2, 10, 4, 12, 6, 14) + PICK(a, b, 1, 9, 3, 11, 5, 13, 7, 15))
#endif

/* The sum of a vector's lanes, by halves */
static inline float lane_total(vf v) {
#if VB == 16
    v = HALVE16(v, v);
    v = HALVE8(v, v);
    v = HALVE4(v, v);
    return HALVE2(v, v)[0];
#else
    v = HALVE4(v, v);
    v = HALVE2(v, v);
    return HALVE1(v, v)[0];
#endif
}

/* Sum of each of 16 vectors' lanes, out[n] = sum_jj v[n][jj]: a tree of shuffles and adds (15 adds and 30
   shuffles for VB = 16, where lane by lane it is 240 dependent scalar additions) */
static inline void lane_sums(const vf v[H], float out[H]) {
#if VB == 16
    vf x[8], y[4], z[2];
    for (int n = 0; n < 8; n++) x[n] = HALVE16(v[2 * n], v[2 * n + 1]); /* (v0 | v1) sums of 8 lanes ... */
    for (int n = 0; n < 4; n++) y[n] = HALVE8(x[2 * n], x[2 * n + 1]);  /* 4 lanes each: v0 v2 v1 v3 ... by order */
    for (int n = 0; n < 2; n++) z[n] = HALVE4(y[2 * n], y[2 * n + 1]);
    const vf t = HALVE2(z[0], z[1]);
    float lanes[VB];
    vstore(lanes, t);
    /* the tree leaves sums in the order of its picks: v n at lane order[n] */
    static const int order[H] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
    for (int n = 0; n < H; n++) out[n] = lanes[order[n]];
#else
    vf x[8], y[4], z[2];
    for (int n = 0; n < 8; n++) x[n] = HALVE4(v[2 * n], v[2 * n + 1]);
    for (int n = 0; n < 4; n++) y[n] = HALVE2(x[2 * n], x[2 * n + 1]);
    for (int n = 0; n < 2; n++) z[n] = HALVE1(y[2 * n], y[2 * n + 1]);
    float lanes[2 * VB];
    vstore(lanes, z[0]);
    vstore(lanes + VB, z[1]);
    static const int order[H] = {0, 4, 2, 6, 1, 5, 3, 7, 8, 12, 10, 14, 9, 13, 11, 15};
    for (int n = 0; n < H; n++) out[n] = lanes[order[n]];
#endif
}

/* One slot's share of em_vote_grad (below), with T factors, the last of them the first M-step's weights: T and `off`
   constant where it is called, so that the loops unroll and a block's numbers stay in registers. */
static inline __attribute__((always_inline)) void grad_slot(const Layer *L, const int64_t Jp, const int T, const float *off, int64_t b,
                                                            int64_t p, int64_t i, const float *grid,
                                                            const float *centre, const Factor *factors,
                                                            const float *acts, float *grad_rows, float *grad_w,
                                                            float *out_sum, float *out_a) {
    const int64_t P = L->P, I = L->I, C = L->C, slot = (b * P + p) * I + i;
    const float a = acts[slot];
    const float *m[4];
    pose_rows(L, grid + b * 16 * C, p * I + i, m);
    const float *w = L->wtiles + i * H * Jp;
    float *gw = grad_w + i * H * Jp;
    vf assigned = {0};
    vf am[H]; /* dL/dM[r][k], lane by lane until the slot is done */
#pragma GCC unroll 16
    for (int n = 0; n < H; n++) am[n] = (vf){0};
    for (int64_t jb = 0; jb < Jp; jb += VB) {
        vf lt[8], gm = {0};
        const float *rt[8];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const Factor *f = factors + t;
            lt[t] = vload(f->base + b * f->stride + (p * I + i) * Jp + jb);
            if (f->inv) lt[t] *= a * vload(f->inv + (b * P + p) * Jp + jb);
            rt[t] = f->right + (b * P + p) * 2 * H * Jp + jb;
        }
        const float *c = centre + (b * P + p) * H * Jp + jb;
        /* a column of W at a time: its four entries and their dL/dW (added up over the rows, then written back)
           live, not the whole tile and all 16 dL/dV, which would spill */
#pragma GCC unroll 4
        for (int col = 0; col < 4; col++) {
            vf wc[4], dw[4];
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                wc[k] = vload(w + (k * 4 + col) * Jp + jb);
                dw[k] = vload(gw + (k * 4 + col) * Jp + jb);
            }
#pragma GCC unroll 4
            for (int row = 0; row < 4; row++) {
                const int l = row * 4 + col;
                const float *mr = m[row];
                const vf shift = off ? off[l] - vload(c + l * Jp) : -vload(c + l * Jp);
                const vf d = mr[0] * wc[0] + shift + mr[1] * wc[1] + mr[2] * wc[2] + mr[3] * wc[3];
                vf g1 = lt[0] * vload(rt[0] + l * Jp), g2 = lt[0] * vload(rt[0] + (H + l) * Jp);
#pragma GCC unroll 8
                for (int t = 1; t < T; t++) {
                    g1 += lt[t] * vload(rt[t] + l * Jp);
                    g2 += lt[t] * vload(rt[t] + (H + l) * Jp);
                }
                /* g_w of the first M-step's weights, the last factor: [V', V'^2] . its right */
                gm += d * (vload(rt[T - 1] + l * Jp) + d * vload(rt[T - 1] + (H + l) * Jp));
                const vf gv = g1 + 2.0f * d * g2; /* dL/dV[row][col] */
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    am[row * 4 + k] += gv * wc[k]; /* dL/dM[row][k] = sum_col dL/dV[row][col] W[k][col] */
                    dw[k] += mr[k] * gv;           /* dL/dW[k][col] = sum_row M[row][k] dL/dV[row][col] */
                }
            }
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) vstore(gw + (k * 4 + col) * Jp + jb, dw[k]);
        }
        const Factor *f = factors + T - 1;
        const vf base = vload(f->base + b * f->stride + (p * I + i) * Jp + jb), inv = vload(f->inv + (b * P + p) * Jp + jb);
        float *s = out_sum + (b * P + p) * Jp + jb;
        vstore(s, vload(s) + gm * lt[T - 1]);
        assigned += gm * base * inv;
    }
    out_a[slot] = lane_total(assigned);
    float gm[H];
    lane_sums(am, gm);
    const int64_t n = L->child[p * I + i];
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 4; k++) grad_rows[((b * 4 + r) * C + n) * 4 + k] += gm[r * 4 + k];
}

/* em_vote_grad's images with Jp, whether there are offsets, and T constants (BY_WIDTH, then a case a T) */
static inline __attribute__((always_inline)) void grad_images(const Layer *L, const int64_t Jp, const int with, int T,
                                                              int64_t first_image, int64_t last_image,
                                                              const float *rows, const float *centre,
                                                              const Factor *factors, const float *acts,
                                                              float *grad_rows, float *grad_w, float *out_sum,
                                                              float *out_a) {
#define GRAD_CASE_ANY(t)                                                                                             \
    for (int64_t b = first_image; b < last_image; b++)                                                               \
        for (int64_t from = 0; from < L->I; from += SLOT_BLOCK)                                                      \
            for (int64_t p = 0; p < L->P; p++)                                                                       \
                for (int64_t i = from; i < L->I && i < from + SLOT_BLOCK; i++)                                       \
                    grad_slot(L, Jp, t, with ? L->offsets + i * H : NULL, b, p, i, rows, centre, factors, acts,       \
                              grad_rows, grad_w, out_sum, out_a);                                                    \
    break
#define GRAD_CASE(t)                                                                                                 \
    case t:                                                                                                          \
        GRAD_CASE_ANY(t)
    switch (T) { /* 2r - 1 factors for r iterations: r = 2 and 3 (the papers') unrolled, r = 1 and 4 with T a variable */
        GRAD_CASE(3);
        GRAD_CASE(5);
    default:
        GRAD_CASE_ANY(T);
    }
#undef GRAD_CASE
#undef GRAD_CASE_ANY
}

/* The votes' gradient dL/d[V', V'^2] = sum_t left_t right_t (never written out): dL/dV = g1 + 2 V' g2, then dL/dM[r][k]
   = sum_j,c dL/dV[r][c] W[k][c] into the child's grad_rows (B, 4, C, 4) and dL/dW[k][c] = sum_r M[r][k] dL/dV[r][c]
   added into grad_w (I, 4, 4, Jp) (the caller's range's own); T = 2r - 1
   factors for r iterations. The same pass does the M-step's side of the backward for the last factor (the first M-step's weights, whose inv is
   given): g_w = [V', V'^2] . right, its sum_i g_w w into out_sum (B, P, Jp) and sum_j g_w R / (n + eps) into out_a
   (B, P, I). */
int em_vote_grad(int64_t first_image, int64_t last_image, int64_t P, int64_t I, int64_t Jp, int64_t C,
                 const int64_t *child, int64_t T, const float *rows, const float *wtiles, const float *offsets,
                 const float *centre, const Factor *factors, const float *acts, float *grad_rows, float *grad_w,
                 float *out_sum, float *out_a) {
    if (T < 1 || T > 7 || T % 2 == 0 || !factors[T - 1].inv) return 2;
    const Layer L = pass_layer(P, I, Jp, C, child, wtiles, offsets);
    {
        const Share share = {first_image, last_image};
        const int64_t images = share.last - share.first;
        memset(grad_rows + share.first * 16 * C, 0, sizeof(float) * images * 16 * C);
        memset(out_sum + share.first * P * Jp, 0, sizeof(float) * images * P * Jp);
        BY_WIDTH(grad_images, &L, T, share.first, share.last, rows, centre, factors, acts, grad_rows,
                 grad_w, out_sum, out_a);
    }
    return 0;
}

/* The backward's per-vote arithmetic without the vote-gradient's own pass: the gradients of an M-step's weights here
   (the E-step's softmax's in em_moments), so that PyTorch keeps only a parent's vectors. R (B, P, I, Jp) has an
   image's `r_stride` floats after the last's (0: every image's R alike, the even start). */

/* weighed_votes for NB images at once (the same slot of each, so the same W tile): NB independent chains of
   arithmetic, where one image's alone leaves the core waiting on its own */
static inline __attribute__((always_inline)) void weighed_votes_n(const int NB, const vf *wt, const float *rows[][4],
                                                                  const float *off, const float *const *c,
                                                                  const float *const *q, int64_t Jp, vf *out) {
    vf acc[2][2] = {{{0}, {0}}, {{0}, {0}}};
#pragma GCC unroll 16
    for (int l = 0; l < H; l++)
#pragma GCC unroll 2
        for (int u = 0; u < NB; u++) {
            const vf d = vote_of(wt, rows[u][l >> 2], l, off, c[u] + l * Jp);
            acc[u][l & 1] += d * (vload(q[u] + l * Jp) + d * vload(q[u] + (H + l) * Jp));
        }
#pragma GCC unroll 2
    for (int u = 0; u < NB; u++) out[u] = acc[u][0] + acc[u][1];
}

/* back_mstep_images' work for NB images b, b + 1, ... at a time */
static inline __attribute__((always_inline)) void back_mstep_some(
    const Layer *L, const int64_t Jp, const int with, const int NB, int64_t b, const float *rows,
    const float *centre, const float *g, const float *R, int64_t r_stride, const float *acts, const float *inv_n,
    const float *g_amount, float *out, float *grad_a, float *totals, float *s) {
    const int64_t P = L->P, I = L->I, C = L->C;
    for (int64_t p = 0; p < P; p++) {
        memset(s, 0, sizeof(float) * NB * Jp);
        for (int64_t i = 0; i < I; i++) {
            const float *m[2][4];
#pragma GCC unroll 2
            for (int u = 0; u < NB; u++) pose_rows(L, rows + (b + u) * 16 * C, p * I + i, m[u]);
            const float *w = L->wtiles + i * H * Jp;
            for (int64_t jb = 0; jb < Jp; jb += VB) {
                vf wt[H], acc[2];
                load_tile(wt, w, Jp, jb);
                const float *c[2], *q[2];
#pragma GCC unroll 2
                for (int u = 0; u < NB; u++) {
                    c[u] = centre + ((b + u) * P + p) * H * Jp + jb;
                    q[u] = g + ((b + u) * P + p) * 2 * H * Jp + jb;
                }
                weighed_votes_n(NB, wt, m, with ? L->offsets + i * H : NULL, c, q, Jp, acc);
#pragma GCC unroll 2
                for (int u = 0; u < NB; u++) {
                    const int64_t at = ((b + u) * P + p) * I + i;
                    const vf inv = vload(inv_n + ((b + u) * P + p) * Jp + jb);
                    const vf r = vload(R + (b + u) * r_stride + (p * I + i) * Jp + jb);
                    vstore(out + at * Jp + jb, acc[u]);
                    vstore(s + u * Jp + jb, vload(s + u * Jp + jb) + acc[u] * r * acts[at] * inv);
                }
            }
        }
#pragma GCC unroll 2
        for (int u = 0; u < NB; u++) {
            const int64_t bp = (b + u) * P + p;
            const float *ga = g_amount + bp * Jp, *inv = inv_n + bp * Jp, *ap = acts + bp * I;
            const float *Rp = R + (b + u) * r_stride + p * I * Jp;
            float *su = s + u * Jp, *op = out + bp * I * Jp;
#pragma omp simd
            for (int64_t j = 0; j < Jp; j++) su[j] = ga[j] - su[j] * inv[j]; /* g_n: the position's sums are whole */
            for (int64_t i = 0; i < I; i++) {
                float *x = op + i * Jp;
                const float *r = Rp + i * Jp;
                float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                for (int64_t j = 0; j < Jp; j++) {
                    const float assigned = x[j] * inv[j] + su[j];
                    sum += assigned * r[j];
                    x[j] = assigned * ap[i];
                }
                grad_a[bp * I + i] += sum;
                totals[(b + u) * C + L->child[p * I + i]] += sum * ap[i]; /* sum_j R x, x = g_assigned a */
            }
        }
    }
}

static inline __attribute__((always_inline)) void back_mstep_images(
    const Layer *L, const int64_t Jp, const int with, int64_t first_image, int64_t last_image, const float *rows,
    const float *centre, const float *g, const float *R, int64_t r_stride, const float *acts, const float *inv_n,
    const float *g_amount, float *out, float *grad_a, float *totals, float *s) {
    int64_t b = first_image;
    for (; b + 2 <= last_image; b += 2)
        back_mstep_some(L, Jp, with, 2, b, rows, centre, g, R, r_stride, acts, inv_n, g_amount, out, grad_a, totals,
                        s);
    if (b < last_image)
        back_mstep_some(L, Jp, with, 1, b, rows, centre, g, R, r_stride, acts, inv_n, g_amount, out, grad_a, totals,
                        s);
}

/* The M-step's side of an iteration after the first, a position at a time: g_w = [V', V'^2] . g (g the gradient of
   its moments, (B, P, 2, 16, Jp)), S_j = sum_i g_w w with w = R a / (n + eps) (inv_n (B, P, Jp) = 1 / (n + eps),
   acts (B, P, I)), then the gradient of n, g_n = g_amount (B, P, Jp) - S / (n + eps), and of each assignment,
   g_assigned = g_w / (n + eps) + g_n: grad_a (B, P, I) += sum_j g_assigned R, and out (B, P, I, Jp) = g_assigned a,
   the gradient dL/dR a that the E-step before receives, and totals (B, C; zeros to begin with) += each child's sum
   over its slots and types of R out, what that E-step's softmax backward subtracts (em_moments takes it there). */
int em_back_mstep(int64_t first_image, int64_t last_image, int64_t P, int64_t I, int64_t Jp, int64_t C,
                  const int64_t *child, const float *rows, const float *wtiles, const float *offsets,
                  const float *centre, const float *g, const float *R, int64_t r_stride, const float *acts,
                  const float *inv_n, const float *g_amount, float *out, float *grad_a, float *totals) {
    const Layer L = pass_layer(P, I, Jp, C, child, wtiles, offsets);
    int code = 0;
    {
        const Share share = {first_image, last_image};
        const int some = share.first < share.last; /* a thread with no images takes no scratch */
        float *s = some ? (float *)malloc(sizeof(float) * 2 * Jp) : NULL; /* two images' */
        if (some && !s) {
            code = 1;
        } else if (some) {
            BY_WIDTH(back_mstep_images, &L, share.first, share.last, rows, centre, g, R, r_stride, acts, inv_n,
                     g_amount, out, grad_a, totals, s);
            free(s);
        }
    }
    return code;
}

/* The end of a training step's M-step, a position at a time (fit_position): from sums (B, P, 2, 16, Jp) and amount n (B, P,
   Jp) as em_moments and em_estep give them, the centre (B, P, 16, Jp), beta_u and beta_a (Jp) and the J real types,
   writes mean d and variance (B, P, 16, Jp), positive (B, P, 16, Jp; the spread above 0), logit (B, P, Jp), and
   where g is given, the next E-step's g (B, P, 2, 16, Jp) = [-2 d / sigma^2, 1 / sigma^2] and constant (B, P, Jp). */
int em_fit(int64_t first_image, int64_t last_image, int64_t P, int64_t Jp, int64_t J,
           const float *sums, const float *amount, const float *centre, const float *beta_u, const float *beta_a,
           float scale, float lam, float *mean, float *variance, uint8_t *positive, float *logit, float *g,
           float *constant) {
    {
        const Share share = {first_image, last_image};
        for (int64_t b = share.first; b < share.last; b++)
            for (int64_t p = 0; p < P; p++) {
                const int64_t at = (b * P + p) * Jp, rows = (b * P + p) * H * Jp, twice = (b * P + p) * 2 * H * Jp;
                fit_position(sums + twice, sums + twice + H * Jp, amount + at, centre + rows, beta_u, beta_a, scale,
                             lam, J, Jp, mean + rows, variance + rows, positive + rows, g ? g + twice : NULL,
                             g ? g + twice + H * Jp : NULL, logit + at, constant ? constant + at : NULL);
            }
    }
    return 0;
}

/* The backward of an M-step's fit, parent by parent (capsnet.nn.em_routing._EMRouting.backward's per-parent
   arithmetic, as em_native_training wrote it in PyTorch): from fit t (amount n (B, P, Jp), mean about the centre d,
   variance and `positive` (spread > 0) (B, P, 16, Jp), logit z (B, P, Jp)), the centre c and beta_u (Jp), and what
   reaches it from the step after: for the last fit, g_mean (B, P, 16, Jp) and g_a (B, P, Jp) = dL/d sigmoid(z); for
   an earlier one, the E-step's g_l summed per parent (B, P, Jp) and sum_i g_l [V', V'^2] (B, P, 2, 16, Jp). Writes
   the gradient of its moments g (B, P, 2, 16, Jp), the gradient of n so far (B, P, Jp), 1 / (n + eps) (B, P, Jp),
   for an earlier fit the E-step's right factor -[-2 d / sigma^2, 1 / sigma^2] / 2 (B, P, 2, 16, Jp), and adds
   lam sum g_z into grad_beta_a (Jp) and 16 sum g_cost n scale into grad_beta_u (Jp), one after the other at own
   (2, Jp; the caller's range's own). */
int em_back_fit(int64_t first_image, int64_t last_image, int64_t P, int64_t Jp, int64_t last,
                const float *amount, const float *mean, const float *variance, const uint8_t *positive, const float *logit,
                const float *centre, const float *beta_u, float scale, float lam, const float *g_mean,
                const float *g_a, const float *g_l_sum, const float *g_l_moments, float *g_moments, float *g_amount,
                float *inverse, float *right, float *own) {
    {
        const Share share = {first_image, last_image};
        float *grad_beta_a = own, *grad_beta_u = grad_beta_a + Jp; /* this thread's */
        for (int64_t b = share.first; b < share.last; b++)
            for (int64_t p = 0; p < P; p++)
                for (int64_t j = 0; j < Jp; j++) {
                    const int64_t at = (b * P + p) * Jp + j, rows = (b * P + p) * H * Jp + j;
                    const int64_t twice = (b * P + p) * 2 * H * Jp + j;
                    const float n = amount[at], z = logit[at], inv = 1.0f / (n + EPSILON), total = n * inv;
                    const float sig = 1.0f / (1.0f + expf(-z));
                    const float g_logit = last ? g_a[at] * sig * (1.0f - sig) : g_l_sum[at] * (1.0f - sig);
                    const float g_k = last ? 0.0f : -0.5f * g_l_sum[at], g_cost = -lam * g_logit;
                    grad_beta_a[j] += lam * g_logit;
                    grad_beta_u[j] += g_cost * n * scale * 16.0f;
                    float g_totals = 0.0f;
                    double volume = 1.0; /* prod_h sigma_h^2, as fit_position takes it */
                    for (int l = 0; l < H; l++) {
                        const int64_t e = rows + l * Jp;
                        const float d = mean[e], var = variance[e], prec = 1.0f / var, c = centre[e];
                        float g_d, g_var;
                        if (last) {
                            g_d = g_mean[e];
                            g_var = 0.0f;
                        } else {
                            const float g_q = g_l_moments[twice + l * Jp];
                            const float g_p0 = -0.5f * g_l_moments[twice + (H + l) * Jp];
                            g_d = g_k * 2.0f * d * prec + g_q * prec;
                            const float g_prec = g_p0 + g_k * d * d + g_q * d;
                            g_var = g_k / var - g_prec * prec * prec;
                            right[twice + l * Jp] = d * prec;
                            right[twice + (H + l) * Jp] = -0.5f * prec;
                        }
                        g_var += g_cost * n * scale * 0.5f / var;
                        volume *= var;
                        const float g_u = positive[e] ? g_var : 0.0f, first = d + c * (1.0f - total);
                        g_moments[twice + l * Jp] = g_d + g_u * 2.0f * (d * total - d - first);
                        g_moments[twice + (H + l) * Jp] = g_u;
                        g_totals += g_d * c + g_u * (d * d - 2.0f * c * (first - d * total));
                    }
                    /* sum_h dcost_h/dn */
                    const float g_n = g_cost * (H * beta_u[j] + 0.5f * (float)log(volume)) * scale;
                    g_amount[at] = g_n + g_totals * EPSILON * inv * inv;
                    inverse[at] = inv;
                }
    }
    return 0;
}

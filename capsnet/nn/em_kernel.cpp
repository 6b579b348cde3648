/* The EM routing kernel's typed entries: em_kernel.c's passes as PyTorch operators (torch.ops.<build name>.*),
   built by torch.utils.cpp_extension for capsnet/nn/em_native.py. Each entry checks what it is given (CPU, float32
   or int64, contiguous, the shapes the passes read: TORCH_CHECK, a RuntimeError in Python) and splits the batch's
   images over torch's own threads (at::parallel_for); a summed output (a W gradient, the betas') is added into the
   row of `own` (threads, ...) of the thread that runs a range, so that no two threads add into the same numbers.
   The caller makes every output; nothing here allocates a tensor. */

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <atomic>
#include <optional>
#include <vector>

#define restrict __restrict__ /* C's keyword, GCC's and Clang's in C++ */
#include "em_kernel.c"
#undef restrict

namespace {

using at::Tensor;
using Shape = std::vector<int64_t>;

/* `t`'s numbers after checking that it is a contiguous CPU tensor of `type` and of shape `shape` (-1: any size) */
template <typename T>
T *numbers(const Tensor &t, const char *name, at::ScalarType type, const Shape &shape) {
    TORCH_CHECK(t.defined() && t.device().is_cpu() && t.scalar_type() == type && t.is_contiguous(), "EM kernel: ",
                name, " must be a contiguous CPU tensor of ", type);
    TORCH_CHECK(t.dim() == (int64_t)shape.size(), "EM kernel: ", name, " has ", t.dim(), " dimensions, not ",
                shape.size());
    for (size_t d = 0; d < shape.size(); d++)
        TORCH_CHECK(shape[d] < 0 || t.size(d) == shape[d], "EM kernel: ", name, " is ", t.sizes(), ", not ",
                    at::IntArrayRef(shape), " (-1: any)");
    return static_cast<T *>(t.data_ptr());
}

float *f32(const Tensor &t, const char *name, const Shape &shape) {
    return numbers<float>(t, name, at::kFloat, shape);
}

const float *maybe(const std::optional<Tensor> &t, const char *name, const Shape &shape) {
    return t.has_value() && t->defined() ? f32(*t, name, shape) : nullptr;
}

/* floats between one image's numbers and the next's: 0 where one set (leading size 1) serves every image */
int64_t stride_of(const Tensor &t) { return t.size(0) == 1 ? 0 : t.numel() / t.size(0); }

/* body(first, last) over the batch's images on torch's threads; a non-zero code from any range is an error */
template <typename F>
void over_images(int64_t batch, const F &body) {
    std::atomic<int> code{0};
    at::parallel_for(0, batch, 1, [&](int64_t first, int64_t last) {
        if (const int c = body(first, last)) code.store(c);
    });
    TORCH_CHECK(code.load() != 1, "EM kernel: no memory for a pass's scratch (batch ", batch, ")");
    TORCH_CHECK(code.load() == 0, "EM kernel: a pass refused its sizes (code ", code.load(), ")");
}

/* the row of `own` (threads, ...: `size` numbers a row) the calling thread adds into */
float *own_row(const Tensor &own, int64_t size) {
    float *base = f32(own.view({own.size(0), -1}), "own", {-1, size});
    const int64_t row = at::get_thread_num();
    TORCH_CHECK(row < own.size(0), "EM kernel: thread ", row, " has no row of its own in ", own.sizes());
    return base + row * size;
}

int64_t block() { return VB; }

void route(const Tensor &grid, const Tensor &acts, const Tensor &tiles, const std::optional<Tensor> &offsets,
           const Tensor &centre, const Tensor &child, const Tensor &slots, const std::optional<Tensor> &start,
           const Tensor &even, const Tensor &beta_u, const Tensor &beta_a, const Tensor &lambdas, double scale,
           double log_floor, const Tensor &out_mean, const Tensor &out_act) {
    const int64_t B = grid.size(0), C = grid.size(2), P = acts.size(1), I = acts.size(2), Jp = tiles.size(3);
    const int64_t J = out_mean.size(3), R = lambdas.numel(), kept = out_mean.size(0), S = slots.size(1);
    TORCH_CHECK(kept == 1 || kept == R, "EM kernel: out_mean keeps 1 or ", R, " iterations, not ", kept);
    TORCH_CHECK(Jp % VB == 0 && Jp >= J, "EM kernel: ", Jp, " padded types for ", J, " in blocks of ", VB);
    const float *g = f32(grid, "grid", {B, 4, C, 4}), *a = f32(acts, "acts", {B, P, I});
    const float *w = f32(tiles, "tiles", {I, 4, 4, Jp}), *off = maybe(offsets, "offsets", {I, 16});
    const float *c = f32(centre, "centre", {B, P, 16, Jp}), *r0 = maybe(start, "start", {B, P, I, Jp});
    const int64_t *ch = numbers<int64_t>(child, "child", at::kLong, {P, I});
    const int64_t *sl = numbers<int64_t>(slots, "slots", at::kLong, {C, S});
    const float *ev = f32(even, "even", {P, I}), *bu = f32(beta_u, "beta_u", {Jp}), *ba = f32(beta_a, "beta_a", {Jp});
    const float *lam = f32(lambdas, "lambdas", {R});
    float *om = f32(out_mean, "out_mean", {kept, B, P, J, 16}), *oa = f32(out_act, "out_act", {kept, B, P, J});
    over_images(B, [&](int64_t first, int64_t last) {
        return em_route(B, first, last, P, I, J, Jp, C, S, R, kept > 1, g, a, w, off, c, ch, sl, r0, ev, bu, ba, lam,
                        (float)scale, (float)log_floor, om, oa);
    });
}

/* The sizes every training pass shares: (B, P, I, Jp, C) from rows (B, 4, C, 4), child (P, I), tiles (I, 4, 4, Jp) */
struct Pass {
    int64_t B, P, I, Jp, C;
    const int64_t *child;
    const float *rows, *tiles, *offsets, *centre;
    Pass(const Tensor &child_, const Tensor &rows_, const Tensor &tiles_, const std::optional<Tensor> &offsets_,
         const Tensor &centre_)
        : B(rows_.size(0)), P(child_.size(0)), I(child_.size(1)), Jp(tiles_.size(3)), C(rows_.size(2)) {
        child = numbers<int64_t>(child_, "child", at::kLong, {P, I});
        rows = f32(rows_, "rows", {B, 4, C, 4});
        tiles = f32(tiles_, "tiles", {I, 4, 4, Jp});
        offsets = maybe(offsets_, "offsets", {I, 16});
        centre = f32(centre_, "centre", {B, P, 16, Jp});
        TORCH_CHECK(Jp % VB == 0, "EM kernel: ", Jp, " padded types, not a multiple of ", VB);
    }
};

void moments(const Tensor &child, const Tensor &rows, const Tensor &tiles, const std::optional<Tensor> &offsets,
             const Tensor &centre, const Tensor &weights, const std::optional<Tensor> &scale,
             const std::optional<Tensor> &assign, const std::optional<Tensor> &totals, const Tensor &out,
             const Tensor &amount) {
    const Pass L(child, rows, tiles, offsets, centre);
    float *w = f32(weights, "weights", {-1, L.P, L.I, L.Jp});
    TORCH_CHECK(weights.size(0) == 1 || weights.size(0) == L.B, "EM kernel: weights for 1 or ", L.B, " images");
    const int64_t stride = stride_of(weights);
    const float *s = maybe(scale, "scale", {L.B, L.P, L.I}), *tot = maybe(totals, "totals", {L.B, L.C});
    const float *r = maybe(assign, "assign", {weights.size(0), L.P, L.I, L.Jp});
    TORCH_CHECK((r == nullptr) == (tot == nullptr), "EM kernel: assign and totals come together");
    float *o = f32(out, "out", {L.B, L.P, 2, 16, L.Jp}), *n = f32(amount, "amount", {L.B, L.P, L.Jp});
    over_images(L.B, [&](int64_t first, int64_t last) {
        return em_moments(first, last, L.P, L.I, L.Jp, L.C, L.child, L.rows, L.tiles, L.offsets, L.centre, w, stride,
                          s, r, tot, o, n);
    });
}

void estep(const Tensor &child, const Tensor &rows, const Tensor &tiles, const std::optional<Tensor> &offsets,
           const Tensor &centre, const Tensor &g, const Tensor &constant, const Tensor &slots, double log_floor,
           const Tensor &assignment, const Tensor &acts, const Tensor &out, const Tensor &amount) {
    const Pass L(child, rows, tiles, offsets, centre);
    const int64_t S = slots.size(1);
    const float *q = f32(g, "g", {L.B, L.P, 2, 16, L.Jp}), *k = f32(constant, "constant", {L.B, L.P, L.Jp});
    const int64_t *sl = numbers<int64_t>(slots, "slots", at::kLong, {L.C, S});
    float *R = f32(assignment, "assignment", {L.B, L.P, L.I, L.Jp});
    const float *a = f32(acts, "acts", {L.B, L.P, L.I});
    float *o = f32(out, "out", {L.B, L.P, 2, 16, L.Jp}), *n = f32(amount, "amount", {L.B, L.P, L.Jp});
    over_images(L.B, [&](int64_t first, int64_t last) {
        return em_estep(first, last, L.P, L.I, L.Jp, L.C, L.child, L.rows, L.tiles, L.offsets, L.centre, q, k, sl, S,
                        (float)log_floor, R, a, o, n);
    });
}

void back_mstep(const Tensor &child, const Tensor &rows, const Tensor &tiles, const std::optional<Tensor> &offsets,
                const Tensor &centre, const Tensor &g, const Tensor &assignment, const Tensor &acts,
                const Tensor &inverse, const Tensor &g_amount, const Tensor &out, const Tensor &grad_a,
                const Tensor &totals) {
    const Pass L(child, rows, tiles, offsets, centre);
    const float *q = f32(g, "g", {L.B, L.P, 2, 16, L.Jp});
    const float *R = f32(assignment, "assignment", {-1, L.P, L.I, L.Jp});
    TORCH_CHECK(assignment.size(0) == 1 || assignment.size(0) == L.B, "EM kernel: R for 1 or ", L.B, " images");
    const float *a = f32(acts, "acts", {L.B, L.P, L.I}), *inv = f32(inverse, "inverse", {L.B, L.P, L.Jp});
    const float *gn = f32(g_amount, "g_amount", {L.B, L.P, L.Jp});
    float *o = f32(out, "out", {L.B, L.P, L.I, L.Jp}), *ga = f32(grad_a, "grad_a", {L.B, L.P, L.I});
    float *tot = f32(totals, "totals", {L.B, L.C});
    over_images(L.B, [&](int64_t first, int64_t last) {
        return em_back_mstep(first, last, L.P, L.I, L.Jp, L.C, L.child, L.rows, L.tiles, L.offsets, L.centre, q, R,
                             stride_of(assignment), a, inv, gn, o, ga, tot);
    });
}

void fit(const Tensor &sums, const Tensor &amount, const Tensor &centre, const Tensor &beta_u, const Tensor &beta_a,
         int64_t parents, double scale, double lam, const Tensor &mean, const Tensor &variance,
         const Tensor &positive, const Tensor &logit, const std::optional<Tensor> &g,
         const std::optional<Tensor> &constant) {
    const int64_t B = sums.size(0), P = sums.size(1), Jp = sums.size(4);
    TORCH_CHECK(parents <= Jp, "EM kernel: ", parents, " parent types in ", Jp);
    const float *s = f32(sums, "sums", {B, P, 2, 16, Jp}), *n = f32(amount, "amount", {B, P, Jp});
    const float *c = f32(centre, "centre", {B, P, 16, Jp}), *bu = f32(beta_u, "beta_u", {Jp});
    const float *ba = f32(beta_a, "beta_a", {Jp});
    float *d = f32(mean, "mean", {B, P, 16, Jp}), *v = f32(variance, "variance", {B, P, 16, Jp});
    auto *pos = numbers<uint8_t>(positive, "positive", at::kBool, {B, P, 16, Jp});
    float *z = f32(logit, "logit", {B, P, Jp});
    TORCH_CHECK(g.has_value() == constant.has_value(), "EM kernel: g and constant come together");
    float *q = g.has_value() ? f32(*g, "g", {B, P, 2, 16, Jp}) : nullptr;
    float *k = constant.has_value() ? f32(*constant, "constant", {B, P, Jp}) : nullptr;
    over_images(B, [&](int64_t first, int64_t last) {
        return em_fit(first, last, P, Jp, parents, s, n, c, bu, ba, (float)scale, (float)lam, d, v, pos, z, q, k);
    });
}

void back_fit(const Tensor &amount, const Tensor &mean, const Tensor &variance, const Tensor &positive,
              const Tensor &logit, const Tensor &centre, const Tensor &beta_u, double scale, double lam,
              const std::optional<Tensor> &g_mean, const std::optional<Tensor> &g_a,
              const std::optional<Tensor> &g_l_sum, const std::optional<Tensor> &g_l_moments, const Tensor &g_moments,
              const Tensor &g_amount, const Tensor &inverse, const std::optional<Tensor> &right, const Tensor &own) {
    const int64_t B = amount.size(0), P = amount.size(1), Jp = amount.size(2);
    const bool last = g_mean.has_value();
    TORCH_CHECK(last == g_a.has_value() && last != g_l_sum.has_value() && last != g_l_moments.has_value() &&
                    last != right.has_value(),
                "EM kernel: the last fit takes g_mean and g_a, an earlier one g_l_sum, g_l_moments and right");
    const float *n = f32(amount, "amount", {B, P, Jp}), *d = f32(mean, "mean", {B, P, 16, Jp});
    const float *v = f32(variance, "variance", {B, P, 16, Jp}), *z = f32(logit, "logit", {B, P, Jp});
    const auto *pos = numbers<uint8_t>(positive, "positive", at::kBool, {B, P, 16, Jp});
    const float *c = f32(centre, "centre", {B, P, 16, Jp}), *bu = f32(beta_u, "beta_u", {Jp});
    const float *gm = maybe(g_mean, "g_mean", {B, P, 16, Jp}), *ga = maybe(g_a, "g_a", {B, P, Jp});
    const float *gls = maybe(g_l_sum, "g_l_sum", {B, P, Jp});
    const float *glm = maybe(g_l_moments, "g_l_moments", {B, P, 2, 16, Jp});
    float *gmo = f32(g_moments, "g_moments", {B, P, 2, 16, Jp}), *gn = f32(g_amount, "g_amount", {B, P, Jp});
    float *inv = f32(inverse, "inverse", {B, P, Jp});
    float *rt = right.has_value() ? f32(*right, "right", {B, P, 2, 16, Jp}) : nullptr;
    over_images(B, [&](int64_t first, int64_t last_image) {
        return em_back_fit(first, last_image, P, Jp, last, n, d, v, pos, z, c, bu, (float)scale, (float)lam, gm, ga,
                           gls, glm, gmo, gn, inv, rt, own_row(own, 2 * Jp));
    });
}

void vote_grad(const Tensor &child, const Tensor &rows, const Tensor &tiles, const std::optional<Tensor> &offsets,
               const Tensor &centre, at::TensorList bases, at::TensorList rights,
               const c10::List<std::optional<Tensor>> &inverses, const Tensor &acts, const Tensor &grad_rows,
               const Tensor &own, const Tensor &out_sum, const Tensor &out_a) {
    const Pass L(child, rows, tiles, offsets, centre);
    const int64_t T = bases.size();
    TORCH_CHECK(T >= 1 && T <= 7 && T % 2 == 1 && (int64_t)rights.size() == T && (int64_t)inverses.size() == T,
                "EM kernel: 1, 3, 5 or 7 factors, each with a base, a right and an inverse or None");
    std::vector<Factor> factors(T);
    for (int64_t t = 0; t < T; t++) {
        const Tensor &base = bases[t];
        TORCH_CHECK(base.size(0) == 1 || base.size(0) == L.B, "EM kernel: a factor for 1 or ", L.B, " images");
        const std::optional<Tensor> inverse = inverses.get(t);
        factors[t].base = f32(base, "a factor's base", {-1, L.P, L.I, L.Jp});
        factors[t].stride = stride_of(base);
        factors[t].inv = maybe(inverse, "a factor's inverse", {L.B, L.P, L.Jp});
        factors[t].right = f32(rights[t], "a factor's right", {L.B, L.P, 2, 16, L.Jp});
    }
    TORCH_CHECK(factors[T - 1].inv != nullptr, "EM kernel: the last factor is an M-step's weights (an inverse)");
    const float *a = f32(acts, "acts", {L.B, L.P, L.I});
    float *gr = f32(grad_rows, "grad_rows", {L.B, 4, L.C, 4});
    float *os = f32(out_sum, "out_sum", {L.B, L.P, L.Jp}), *oa = f32(out_a, "out_a", {L.B, L.P, L.I});
    const int64_t tile = L.I * 16 * L.Jp;
    over_images(L.B, [&](int64_t first, int64_t last) {
        return em_vote_grad(first, last, L.P, L.I, L.Jp, L.C, L.child, T, L.rows, L.tiles, L.offsets, L.centre,
                            factors.data(), a, gr, own_row(own, tile), os, oa);
    });
}

}  // namespace

TORCH_LIBRARY(TORCH_EXTENSION_NAME, m) {
    m.def("block", &block);
    m.def("route", &route);
    m.def("moments", &moments);
    m.def("estep", &estep);
    m.def("back_mstep", &back_mstep);
    m.def("fit", &fit);
    m.def("back_fit", &back_fit);
    m.def("vote_grad", &vote_grad);
}

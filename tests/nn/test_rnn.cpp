// The recurrent layers against a float64 loop of PyTorch's equations (gate orders, GRU's reset
// applied to h weight_hh^T + bias_hh, bidirectional and multi-layer wiring, h_n's order), their
// layouts (batch_first, unbatched), parameter names and printed forms, gradients by gradcheck,
// dropout between layers, bad input, a GRU that learns a running sum, and packed batches (each
// sequence as if it ran alone).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/kiln.h"
#include "nn/layers.h"
#include "nn/optim/adam.h"
#include "nn/rnn.h"
#include "tests/bitwise.h"

using namespace kiln;
using namespace kiln::nn;
using kiln::test::bitwise_equal;

namespace {

using Vec = std::vector<double>;

double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// y = W v + b for W [rows, cols] (row-major values), b optional (empty).
Vec affine(const Vec& w, const Vec& b, const Vec& v) {
  const size_t cols = v.size(), rows = w.size() / cols;
  Vec y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    double s = b.empty() ? 0.0 : b[r];
    for (size_t k = 0; k < cols; ++k) s += w[r * cols + k] * v[k];
    y[r] = s;
  }
  return y;
}

Vec vals(const Tensor& t) { return t.defined() ? t.to_vector_double() : Vec(); }

// One step of PyTorch's cell equations for one sample, in float64. c is the LSTM's cell state.
Vec ref_step(RNNKind kind, const TensorList& w, const Vec& x, const Vec& h, Vec& c) {
  const Vec gi = affine(vals(w[0]), vals(w[2]), x), gh = affine(vals(w[1]), vals(w[3]), h);
  const size_t n = kind == RNNKind::LSTM ? c.size() : h.size();  // h is shorter with a projection
  Vec out(n);
  for (size_t k = 0; k < n; ++k) {
    switch (kind) {
      case RNNKind::RNNTanh: out[k] = std::tanh(gi[k] + gh[k]); break;
      case RNNKind::RNNReLU: out[k] = std::max(0.0, gi[k] + gh[k]); break;
      case RNNKind::LSTM: {
        const double i = sig(gi[k] + gh[k]), f = sig(gi[n + k] + gh[n + k]);
        const double g = std::tanh(gi[2 * n + k] + gh[2 * n + k]), o = sig(gi[3 * n + k] + gh[3 * n + k]);
        c[k] = f * c[k] + i * g;
        out[k] = o * std::tanh(c[k]);
        break;
      }
      case RNNKind::GRU: {
        const double r = sig(gi[k] + gh[k]), z = sig(gi[n + k] + gh[n + k]);
        const double nn = std::tanh(gi[2 * n + k] + r * gh[2 * n + k]);
        out[k] = (1 - z) * nn + z * h[k];
        break;
      }
    }
  }
  return out;
}

// The whole layer for one sample x [L][input]: outputs [L][D * hidden], and h_n, c_n per
// (layer, direction).
struct RefOut {
  std::vector<Vec> output, h_n, c_n;
};

RefOut ref_run(const RNNBase& m, RNNKind kind, const std::vector<Vec>& seq) {
  const size_t steps = seq.size(), hidden = static_cast<size_t>(m.hidden_size);
  const int64_t directions = m.bidirectional ? 2 : 1;
  std::vector<Vec> x = seq;
  RefOut r;
  for (int64_t layer = 0; layer < m.num_layers; ++layer) {
    std::vector<Vec> next(steps);
    for (int64_t d = 0; d < directions; ++d) {
      const TensorList w = m.layer_parameters(layer, d);
      Vec h(m.proj_size > 0 ? static_cast<size_t>(m.proj_size) : hidden, 0.0), c(hidden, 0.0);
      for (size_t i = 0; i < steps; ++i) {
        const size_t t = d == 0 ? i : steps - 1 - i;
        h = ref_step(kind, w, x[t], h, c);
        if (w[4].defined()) h = affine(vals(w[4]), {}, h);  // h_t = W_hr (o * tanh(c_t))
        next[t].insert(next[t].end(), h.begin(), h.end());
      }
      r.h_n.push_back(h);
      r.c_n.push_back(c);
    }
    x = next;
  }
  r.output = x;
  return r;
}

double max_diff(const Tensor& t, const Vec& expected) {
  const Vec v = t.to_vector_double();
  REQUIRE(v.size() == expected.size());
  double worst = 0;
  for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::fabs(v[i] - expected[i]));
  return worst;
}

// The sequence layer under test, by kind.
std::unique_ptr<RNNBase> make(RNNKind kind, int64_t in, int64_t hidden, int64_t layers, bool bias, bool bidirectional) {
  switch (kind) {
    case RNNKind::LSTM: return std::make_unique<LSTM>(in, hidden, layers, bias, false, 0.0, bidirectional);
    case RNNKind::GRU: return std::make_unique<GRU>(in, hidden, layers, bias, false, 0.0, bidirectional);
    case RNNKind::RNNReLU:
      return std::make_unique<RNN>(in, hidden, layers, RNNNonlinearity::ReLU, bias, false, 0.0, bidirectional);
    case RNNKind::RNNTanh: break;
  }
  return std::make_unique<RNN>(in, hidden, layers, RNNNonlinearity::Tanh, bias, false, 0.0, bidirectional);
}

RNNOutput call(RNNBase& m, RNNKind kind, const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) {
  if (kind == RNNKind::LSTM) return static_cast<LSTM&>(m)(x, h0, c0);
  if (kind == RNNKind::GRU) return static_cast<GRU&>(m)(x, h0);
  return static_cast<RNN&>(m)(x, h0);
}

const char* kind_name(RNNKind kind) {
  return kind == RNNKind::LSTM ? "LSTM" : kind == RNNKind::GRU ? "GRU" : kind == RNNKind::RNNReLU ? "RNN relu" : "RNN";
}

}  // namespace

TEST_CASE("RNN, LSTM and GRU follow PyTorch's equations, two layers and both directions", "[nn][rnn]") {
  const TensorOptions f64(DType::Float64);
  for (RNNKind kind : {RNNKind::RNNTanh, RNNKind::RNNReLU, RNNKind::LSTM, RNNKind::GRU}) {
    for (bool bidirectional : {false, true}) {
      INFO(kind_name(kind) << (bidirectional ? " bidirectional" : ""));
      manual_seed(61);
      const auto m = make(kind, 3, 4, 2, true, bidirectional);
      m->to(DType::Float64);
      const int64_t steps = 5, batch = 2, directions = bidirectional ? 2 : 1;
      const Tensor x = randn({steps, batch, 3}, f64);
      const RNNOutput y = call(*m, kind, x);
      CHECK(y.output.sizes() == Shape{steps, batch, 4 * directions});
      CHECK(y.h_n.sizes() == Shape{2 * directions, batch, 4});
      CHECK(y.c_n.defined() == (kind == RNNKind::LSTM));
      for (int64_t s = 0; s < batch; ++s) {
        std::vector<Vec> seq;
        for (int64_t t = 0; t < steps; ++t) seq.push_back(x.select(0, t).select(0, s).to_vector_double());
        const RefOut r = ref_run(*m, kind, seq);
        for (int64_t t = 0; t < steps; ++t) CHECK(max_diff(y.output.select(0, t).select(0, s), r.output[t]) < 1e-12);
        for (int64_t k = 0; k < 2 * directions; ++k) {
          CHECK(max_diff(y.h_n.select(0, k).select(0, s), r.h_n[static_cast<size_t>(k)]) < 1e-12);
          if (kind == RNNKind::LSTM) {
            CHECK(max_diff(y.c_n.select(0, k).select(0, s), r.c_n[static_cast<size_t>(k)]) < 1e-12);
          }
        }
      }
    }
  }
}

TEST_CASE("RNN layers: batch_first, unbatched inputs, initial states, cells as one step", "[nn][rnn]") {
  const TensorOptions f64(DType::Float64);
  manual_seed(62);
  LSTM lstm(3, 4, 2, true, false, 0.0, true);
  lstm.to(DType::Float64);
  const Tensor x = randn({5, 2, 3}, f64), h0 = randn({4, 2, 4}, f64), c0 = randn({4, 2, 4}, f64);
  const RNNOutput y = lstm(x, h0, c0);
  // batch_first reads and writes [N, L, *]: the same numbers, transposed.
  lstm.batch_first = true;
  const RNNOutput yb = lstm(x.transpose(0, 1), h0, c0);
  CHECK(bitwise_equal(yb.output, y.output.transpose(0, 1)));
  CHECK(bitwise_equal(yb.h_n, y.h_n));
  lstm.batch_first = false;
  // Unbatched [L, input] with [layers * D, hidden] states is sample 1 alone: the same numbers up to
  // the order of the GEMM's sums, which OpenBLAS may change between one row and two (it does on
  // an AMD EPYC in float64; kiln's own GEMM gives the same bits).
  const RNNOutput y1 = lstm(x.select(1, 1), h0.select(1, 1), c0.select(1, 1));
  for (auto [alone, batched] : {std::pair{y1.output, y.output.select(1, 1)}, std::pair{y1.c_n, y.c_n.select(1, 1)}}) {
    const Vec a = vals(alone), b = vals(batched.contiguous());
    REQUIRE(a.size() == b.size());
    for (size_t k = 0; k < a.size(); ++k) CHECK(a[k] == Approx(b[k]).margin(1e-12));
  }
  // The initial states matter, and zeros are the default.
  CHECK(!bitwise_equal(lstm(x).output, y.output));
  CHECK(bitwise_equal(lstm(x).output, lstm(x, zeros({4, 2, 4}, f64), zeros({4, 2, 4}, f64)).output));

  // A cell with a layer's parameters is one step of that layer.
  for (RNNKind kind : {RNNKind::RNNTanh, RNNKind::LSTM, RNNKind::GRU}) {
    INFO(kind_name(kind));
    const auto layer = make(kind, 3, 4, 1, true, false);
    layer->to(DType::Float64);
    const Tensor step = randn({1, 2, 3}, f64), h = randn({1, 2, 4}, f64), c = randn({1, 2, 4}, f64);
    const RNNOutput out = call(*layer, kind, step, h, c);
    std::unique_ptr<RNNCellBase> cell;
    if (kind == RNNKind::LSTM) cell = std::make_unique<LSTMCell>(3, 4);
    if (kind == RNNKind::GRU) cell = std::make_unique<GRUCell>(3, 4);
    if (kind == RNNKind::RNNTanh) cell = std::make_unique<RNNCell>(3, 4);
    cell->to(DType::Float64);
    const TensorList w = layer->layer_parameters(0, 0);
    {
      NoGradGuard no_grad;
      cell->weight_ih.copy_(w[0]);
      cell->weight_hh.copy_(w[1]);
      cell->bias_ih.copy_(w[2]);
      cell->bias_hh.copy_(w[3]);
    }
    Tensor next;
    if (kind == RNNKind::LSTM) {
      const TensorList hc = static_cast<LSTMCell&>(*cell)(step.select(0, 0), h.select(0, 0), c.select(0, 0));
      CHECK(bitwise_equal(hc[1], out.c_n.select(0, 0)));
      next = hc[0];
    } else if (kind == RNNKind::GRU) {
      next = static_cast<GRUCell&>(*cell)(step.select(0, 0), h.select(0, 0));
    } else {
      next = static_cast<RNNCell&>(*cell)(step.select(0, 0), h.select(0, 0));
    }
    CHECK(bitwise_equal(next, out.h_n.select(0, 0)));
    // Unbatched cells take [input] and [hidden].
    if (kind == RNNKind::GRU) {
      CHECK(bitwise_equal(static_cast<GRUCell&>(*cell)(step.select(0, 0).select(0, 1), h.select(0, 0).select(0, 1)),
                          next.select(0, 1)));
    }
  }
}

TEST_CASE("RNN layers name their parameters as PyTorch, print as PyTorch and refuse bad input", "[nn][rnn]") {
  GRU gru(3, 5, 2, true, true, 0.25, true);
  CHECK(gru.str() == "GRU(3, 5, num_layers=2, batch_first=True, dropout=0.25, bidirectional=True)");
  CHECK(LSTM(3, 5).str() == "LSTM(3, 5)");
  CHECK(RNN(2, 3, 1, RNNNonlinearity::ReLU, false).str() == "RNN(2, 3, bias=False)");
  CHECK(RNNCell(2, 3, true, RNNNonlinearity::ReLU).str() == "RNNCell(2, 3, nonlinearity=relu)");
  CHECK(LSTMCell(2, 3, false).str() == "LSTMCell(2, 3, bias=False)");
  const auto named = gru.named_parameters();
  REQUIRE(named.size() == 16);
  CHECK(named[0].first == "weight_ih_l0");
  CHECK(named[1].first == "weight_hh_l0");
  CHECK(named[2].first == "bias_ih_l0");
  CHECK(named[4].first == "weight_ih_l0_reverse");
  CHECK(named[8].first == "weight_ih_l1");
  CHECK(named[8].second.sizes() == Shape{15, 10});  // 3 gates x 5 hidden, from both directions' 5
  CHECK(named[13].first == "weight_hh_l1_reverse");
  CHECK(LSTM(3, 5).named_parameters()[0].second.sizes() == Shape{20, 3});
  // PyTorch's init: uniform(-1/sqrt(hidden), 1/sqrt(hidden)).
  const double bound = 1.0 / std::sqrt(5.0);
  for (const auto& [name, p] : named) CHECK(max(abs(p)).item<double>() <= bound);

  LSTM lstm(3, 4);
  CHECK_THROWS_WITH(lstm(randn({5, 2, 4})), Catch::Contains("LSTM") && Catch::Contains("[5, 2, 4]"));
  CHECK_THROWS_WITH(lstm(randn({5, 2, 3}), randn({1, 3, 4}), randn({1, 3, 4})),
                    Catch::Contains("LSTM") && Catch::Contains("h0") && Catch::Contains("[1, 2, 4]"));
  CHECK_THROWS_WITH(lstm(randn({5, 2, 3}), randn({1, 2, 4})), Catch::Contains("LSTM") && Catch::Contains("c0"));
  CHECK_THROWS_WITH(GRU(3, 4, 1, true, false, 1.5), Catch::Contains("GRU") && Catch::Contains("dropout"));
  CHECK_THROWS_WITH(GRU(3, 0), Catch::Contains("GRU") && Catch::Contains("hidden_size"));
  CHECK_THROWS_WITH(RNN(3, 4, 0), Catch::Contains("RNN") && Catch::Contains("num_layers"));
  CHECK_THROWS_WITH(GRUCell(3, 4)(randn({2, 3}), randn({3, 4})), Catch::Contains("GRUCell") && Catch::Contains("h"));
  CHECK_THROWS_WITH(gru.layer_parameters(2, 0), Catch::Contains("GRU") && Catch::Contains("layer 2"));
}

TEST_CASE("RNN layers: gradients through time by gradcheck, dropout only between layers in training", "[nn][rnn]") {
  const TensorOptions f64(DType::Float64);
  for (RNNKind kind : {RNNKind::LSTM, RNNKind::GRU}) {
    INFO(kind_name(kind));
    manual_seed(63);
    const auto m = make(kind, 2, 3, 2, true, true);
    m->to(DType::Float64);
    Tensor x = randn({4, 2, 2}, f64).set_requires_grad(true);
    TensorList inputs{x};
    for (const Tensor& p : m->parameters()) inputs.push_back(p);
    const GradcheckResult r = gradcheck(
        [&](const TensorList&) {
          const RNNOutput y = call(*m, kind, x);
          return kind == RNNKind::LSTM ? TensorList{y.output, y.h_n, y.c_n} : TensorList{y.output, y.h_n};
        },
        inputs);
    INFO(r.message);
    CHECK(r.ok);
  }
  // Dropout 1 between two layers: in training the second layer sees zeros, so the output does not
  // depend on the input; in eval there is no dropout.
  manual_seed(64);
  GRU gru(2, 3, 2, true, false, 1.0);
  const Tensor a = randn({4, 1, 2}), b = randn({4, 1, 2});
  CHECK(bitwise_equal(gru(a).output, gru(b).output));
  gru.eval();
  CHECK(!bitwise_equal(gru(a).output, gru(b).output));
}

TEST_CASE("a GRU learns the running sum of its inputs", "[nn][rnn]") {
  manual_seed(65);
  auto gru = std::make_shared<GRU>(1, 8, 1, true, true);
  auto head = std::make_shared<Linear>(8, 1);
  TensorList params = gru->parameters();
  for (const Tensor& p : head->parameters()) params.push_back(p);
  optim::Adam opt(params, 0.02);
  auto loss_now = [&](const Tensor& x) {
    const Tensor target = cumsum(x, 1);
    return mse_loss(head->forward((*gru)(x).output), target);
  };
  const Tensor probe = rand({16, 6, 1}) - 0.5;
  const double before = loss_now(probe).item<double>();
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    Tensor loss = loss_now(rand({16, 6, 1}) - 0.5);
    loss.backward();
    opt.step();
  }
  const double after = loss_now(probe).item<double>();
  INFO("before " << before << ", after " << after);
  CHECK(after < 0.05 * before);
}

TEST_CASE("pad_sequence and unpad_sequence: right and left padding, batch_first, gradients, errors", "[rnn]") {
  const Tensor a = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}).reshape({3, 2});
  const Tensor b = tensor(std::vector<double>{7, 8}).reshape({1, 2});
  const Tensor padded = pad_sequence({a, b}, false, -1.0);  // [3, 2, 2]: time first
  REQUIRE(padded.sizes() == Shape{3, 2, 2});
  CHECK(padded.to_vector<double>() == std::vector<double>{1, 2, 7, 8, 3, 4, -1, -1, 5, 6, -1, -1});
  const Tensor left = pad_sequence({a, b}, true, 0.0, PaddingSide::Left);  // [2, 3, 2]
  REQUIRE(left.sizes() == Shape{2, 3, 2});
  CHECK(left.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 7, 8});

  // unpad gives the sequences back (views of the batch), from either layout.
  const TensorList back = unpad_sequence(padded, {3, 1});
  CHECK(back[0].to_vector<double>() == a.to_vector<double>());
  CHECK(back[1].to_vector<double>() == b.to_vector<double>());
  CHECK(unpad_sequence(pad_sequence({a, b}, true), {3, 1}, true)[1].sizes() == Shape{1, 2});

  // The padding takes no gradient; each sequence its own.
  Tensor x = tensor(std::vector<double>{1, 2}).reshape({2, 1}), y = tensor(std::vector<double>{3}).reshape({1, 1});
  x.set_requires_grad(true);
  y.set_requires_grad(true);
  sum(mul(pad_sequence({x, y}, true), tensor(std::vector<double>{1, 2, 3, 4}).reshape({2, 2, 1}))).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 2});
  CHECK(y.grad().to_vector<double>() == std::vector<double>{3});

  CHECK_THROWS_WITH(pad_sequence({a, zeros({2, 3}, DType::Float64)}),
                    Catch::Contains("pad_sequence") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(pad_sequence({}), Catch::Contains("pad_sequence"));
  CHECK_THROWS_WITH(unpad_sequence(padded, {3}), Catch::Contains("unpad_sequence") && Catch::Contains("batch of 2"));
  CHECK_THROWS_WITH(unpad_sequence(padded, {4, 1}), Catch::Contains("length 4"));
}

TEST_CASE("pack_padded_sequence and pad_packed_sequence: the packed order, sorting, round trips, errors", "[rnn]") {
  // Three sequences of lengths 2, 3, 1 (batch order), one feature: sequence b's step t is 10 b + t.
  const Tensor padded = tensor(std::vector<double>{0, 10, 20, 1, 11, -1, -1, 12, -1}).reshape({3, 3, 1});
  CHECK_THROWS_WITH(pack_padded_sequence(padded, {2, 3, 1}),
                    Catch::Contains("pack_padded_sequence") && Catch::Contains("enforce_sorted"));
  const PackedSequence p = pack_padded_sequence(padded, {2, 3, 1}, false, false);
  // Sorted by length: sequence 1, 0, 2; step 0 of all three, step 1 of two, step 2 of one.
  CHECK(p.sorted_indices == std::vector<int64_t>{1, 0, 2});
  CHECK(p.unsorted_indices == std::vector<int64_t>{1, 0, 2});
  CHECK(p.batch_sizes == std::vector<int64_t>{3, 2, 1});
  CHECK(p.data.to_vector<double>() == std::vector<double>{10, 0, 20, 11, 1, 12});
  auto [back, lengths] = pad_packed_sequence(p, false, -1.0);
  CHECK(lengths == std::vector<int64_t>{2, 3, 1});
  CHECK(back.to_vector<double>() == padded.to_vector<double>());
  // batch_first both ways, and total_length pads further.
  const PackedSequence q = pack_padded_sequence(padded.transpose(0, 1), {2, 3, 1}, true, false);
  CHECK(q.data.to_vector<double>() == p.data.to_vector<double>());
  auto [wide, wide_lengths] = pad_packed_sequence(q, true, 0.0, 5);
  CHECK(wide.sizes() == Shape{3, 5, 1});
  CHECK(wide.select(0, 1).flatten().to_vector<double>() == std::vector<double>{10, 11, 12, 0, 0});
  // A sorted batch needs no indices; pack_sequence and unpack_sequence round-trip.
  const TensorList seqs{tensor(std::vector<double>{1, 2, 3}).reshape({3, 1}),
                        tensor(std::vector<double>{4}).reshape({1, 1})};
  const PackedSequence s = pack_sequence(seqs);
  CHECK(s.sorted_indices.empty());
  CHECK(s.data.to_vector<double>() == std::vector<double>{1, 4, 2, 3});
  const TensorList un = unpack_sequence(s);
  REQUIRE(un.size() == 2);
  CHECK(un[0].to_vector<double>() == std::vector<double>{1, 2, 3});
  CHECK(un[1].to_vector<double>() == std::vector<double>{4});
  // The packing is differentiable: each padded element that is packed gets its gradient once.
  Tensor leaf = padded.clone().set_requires_grad(true);
  sum(pack_padded_sequence(leaf, {2, 3, 1}, false, false).data).backward();
  CHECK(leaf.grad().flatten().to_vector<double>() == std::vector<double>{1, 1, 1, 1, 1, 0, 0, 1, 0});

  CHECK_THROWS_WITH(pack_padded_sequence(padded, {2, 3}), Catch::Contains("2 lengths for a batch of 3"));
  CHECK_THROWS_WITH(pack_padded_sequence(padded, {3, 0, 1}, false, false), Catch::Contains("length 0"));
  CHECK_THROWS_WITH(pack_padded_sequence(padded, {4, 3, 1}), Catch::Contains("length 4"));
  CHECK_THROWS_WITH(pad_packed_sequence(p, false, 0.0, 2), Catch::Contains("total_length 2"));
  PackedSequence bad = p;
  bad.batch_sizes = {3, 2};
  CHECK_THROWS_WITH(pad_packed_sequence(bad), Catch::Contains("sum to 5") && Catch::Contains("6 rows"));
  bad.batch_sizes = {2, 3, 1};
  CHECK_THROWS_WITH(pad_packed_sequence(bad), Catch::Contains("non-increasing"));
  bad = p;
  bad.unsorted_indices = {0, 1, 2};
  CHECK_THROWS_WITH(pad_packed_sequence(bad), Catch::Contains("inverse permutations"));
}

TEST_CASE("RNN, LSTM and GRU on a packed batch: each sequence as if it ran alone, gradients too", "[nn][rnn]") {
  manual_seed(61);
  const std::vector<int64_t> lengths{3, 5, 1, 4};  // unsorted: the layers sort and unsort
  TensorList seqs;
  for (const int64_t len : lengths) seqs.push_back(randn({len, 3}).to(DType::Float64));
  const Tensor h0 = randn({4, 4, 5}).to(DType::Float64);  // 2 layers x 2 directions, batch 4
  const Tensor c0 = randn({4, 4, 5}).to(DType::Float64);
  for (const RNNKind kind : {RNNKind::RNNTanh, RNNKind::LSTM, RNNKind::GRU}) {
    std::shared_ptr<RNNBase> layer;
    if (kind == RNNKind::LSTM) layer = std::make_shared<LSTM>(3, 5, 2, true, false, 0.0, true);
    if (kind == RNNKind::GRU) layer = std::make_shared<GRU>(3, 5, 2, true, false, 0.0, true);
    if (kind == RNNKind::RNNTanh) layer = std::make_shared<RNN>(3, 5, 2, RNNNonlinearity::Tanh, true, false, 0.0, true);
    layer->to(DType::Float64);
    const bool lstm = kind == RNNKind::LSTM;
    INFO(layer->type_name());
    auto run_packed = [&](const PackedSequence& p) {
      if (lstm) return static_cast<LSTM&>(*layer).forward(p, h0, c0);
      if (kind == RNNKind::GRU) return static_cast<GRU&>(*layer).forward(p, h0);
      return static_cast<RNN&>(*layer).forward(p, h0);
    };
    auto run_alone = [&](const Tensor& x, const Tensor& h, const Tensor& c) {
      if (lstm) return static_cast<LSTM&>(*layer).forward(x, h, c);
      if (kind == RNNKind::GRU) return static_cast<GRU&>(*layer).forward(x, h);
      return static_cast<RNN&>(*layer).forward(x, h);
    };
    const RNNPackedOutput out = run_packed(pack_sequence(seqs, false));
    const TensorList outputs = unpack_sequence(out.output);
    CHECK(out.h_n.sizes() == Shape{4, 4, 5});
    Tensor alone_loss = zeros({}, TensorOptions(DType::Float64));
    for (size_t b = 0; b < seqs.size(); ++b) {
      const int64_t i = static_cast<int64_t>(b);
      const RNNOutput alone = run_alone(seqs[b], h0.select(1, i), lstm ? c0.select(1, i) : Tensor());
      const Vec got = vals(outputs[b]), want = vals(alone.output);
      REQUIRE(got.size() == want.size());
      for (size_t k = 0; k < got.size(); ++k) CHECK(got[k] == Approx(want[k]).margin(1e-12));
      const Vec hn = vals(out.h_n.select(1, i).contiguous()), hn_alone = vals(alone.h_n);
      for (size_t k = 0; k < hn.size(); ++k) CHECK(hn[k] == Approx(hn_alone[k]).margin(1e-12));
      if (lstm) {
        const Vec cn = vals(out.c_n.select(1, i).contiguous()), cn_alone = vals(alone.c_n);
        for (size_t k = 0; k < cn.size(); ++k) CHECK(cn[k] == Approx(cn_alone[k]).margin(1e-12));
      }
      alone_loss = add(alone_loss, add(sum(mul(alone.output, alone.output)), sum(alone.h_n)));
    }
    // The weights' gradients of a loss over the packed run equal those of the runs alone.
    layer->zero_grad();
    alone_loss.backward();
    const TensorList params = layer->parameters();
    std::vector<Vec> alone_grads;
    for (const Tensor& w : params) alone_grads.push_back(vals(w.grad()));
    layer->zero_grad();
    const RNNPackedOutput again = run_packed(pack_sequence(seqs, false));
    add(sum(mul(again.output.data, again.output.data)), sum(again.h_n)).backward();
    for (size_t k = 0; k < params.size(); ++k) {
      const Vec g = vals(params[k].grad());
      REQUIRE(g.size() == alone_grads[k].size());
      for (size_t e = 0; e < g.size(); ++e) CHECK(g[e] == Approx(alone_grads[k][e]).margin(1e-10));
    }
  }
  LSTM lstm(3, 5);
  CHECK_THROWS_WITH(lstm.forward(pack_sequence({randn({2, 4})})),
                    Catch::Contains("LSTM") && Catch::Contains("[sum of the lengths, 3]") && Catch::Contains("[2, 4]"));
  CHECK_THROWS_WITH(lstm.forward(pack_sequence({randn({2, 3})}), zeros({1, 2, 5}), zeros({1, 2, 5})),
                    Catch::Contains("LSTM") && Catch::Contains("h0 must be [1, 1, 5]"));
}

TEST_CASE("LSTM with proj_size: PyTorch's projected equations, shapes, names, packed batches", "[nn][rnn]") {
  const TensorOptions f64(DType::Float64);
  manual_seed(63);
  LSTM lstm(3, 5, 2, true, false, 0.0, true, 2);
  lstm.to(DType::Float64);
  CHECK(lstm.str() == "LSTM(3, 5, proj_size=2, num_layers=2, bidirectional=True)");
  const auto named = lstm.named_parameters();
  REQUIRE(named.size() == 20);  // 2 layers x 2 directions x (4 + weight_hr)
  CHECK(named[1].first == "weight_hh_l0");
  CHECK(named[1].second.sizes() == Shape{20, 2});  // 4 gates x 5 hidden, from a projected h of 2
  CHECK(named[4].first == "weight_hr_l0");
  CHECK(named[4].second.sizes() == Shape{2, 5});
  CHECK(named[9].first == "weight_hr_l0_reverse");
  CHECK(named[10].first == "weight_ih_l1");
  CHECK(named[10].second.sizes() == Shape{20, 4});  // both directions' 2
  const int64_t steps = 4, batch = 2;
  const Tensor x = randn({steps, batch, 3}, f64);
  const Tensor h0 = randn({4, batch, 2}, f64), c0 = randn({4, batch, 5}, f64);
  const RNNOutput y = lstm(x);
  CHECK(y.output.sizes() == Shape{steps, batch, 4});
  CHECK(y.h_n.sizes() == Shape{4, batch, 2});
  CHECK(y.c_n.sizes() == Shape{4, batch, 5});
  for (int64_t s = 0; s < batch; ++s) {
    std::vector<Vec> seq;
    for (int64_t t = 0; t < steps; ++t) seq.push_back(x.select(0, t).select(0, s).to_vector_double());
    const RefOut r = ref_run(lstm, RNNKind::LSTM, seq);
    for (int64_t t = 0; t < steps; ++t) CHECK(max_diff(y.output.select(0, t).select(0, s), r.output[t]) < 1e-12);
    for (int64_t k = 0; k < 4; ++k) {
      CHECK(max_diff(y.h_n.select(0, k).select(0, s), r.h_n[static_cast<size_t>(k)]) < 1e-12);
      CHECK(max_diff(y.c_n.select(0, k).select(0, s), r.c_n[static_cast<size_t>(k)]) < 1e-12);
    }
  }
  // Initial states of the two sizes; a packed batch gives each sequence its own run.
  const RNNOutput from_states = lstm(x, h0, c0);
  const RNNPackedOutput packed = lstm(pack_padded_sequence(x, {4, 2}), h0, c0);
  const RNNOutput second_alone = lstm(x.select(1, 1).narrow(0, 0, 2), h0.select(1, 1), c0.select(1, 1));
  CHECK(max_diff(unpack_sequence(packed.output)[0], from_states.output.select(1, 0).to_vector_double()) < 1e-12);
  CHECK(max_diff(unpack_sequence(packed.output)[1], second_alone.output.to_vector_double()) < 1e-12);
  CHECK(max_diff(packed.h_n.select(1, 1), second_alone.h_n.to_vector_double()) < 1e-12);
  CHECK_THROWS_WITH(lstm(x, c0, c0), Catch::Contains("LSTM") && Catch::Contains("h0 must be [4, 2, 2]"));
  CHECK_THROWS_WITH(LSTM(3, 5, 1, true, false, 0.0, false, 5),
                    Catch::Contains("LSTM") && Catch::Contains("proj_size") && Catch::Contains("5"));
  CHECK_THROWS_WITH(LSTM(3, 5, 1, true, false, 0.0, false, -1), Catch::Contains("proj_size"));
}

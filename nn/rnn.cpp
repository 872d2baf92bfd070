// The recurrent layers of nn/rnn.h as compositions: per layer and direction, one linear of the
// whole sequence with weight_ih, then a step per time step. The steps' states are plain tensors
// on the tape, so the backward is autograd's through time.
#include "nn/rnn.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/ops/activation.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/index.h"
#include "core/ops/matmul.h"
#include "core/ops/shape.h"
#include "kernels/error.h"
#include "nn/init.h"
#include "nn/layers.h"

namespace kiln::nn {
namespace {

int64_t gates_of(RNNKind kind) { return kind == RNNKind::LSTM ? 4 : kind == RNNKind::GRU ? 3 : 1; }

// uniform(-1/sqrt(hidden), 1/sqrt(hidden)) for every parameter, PyTorch's reset_parameters.
void init_uniform(const TensorList& params, int64_t hidden_size) {
  const double bound = hidden_size > 0 ? 1.0 / std::sqrt(static_cast<double>(hidden_size)) : 0.0;
  for (const Tensor& p : params) {
    if (p.defined()) init::uniform_(p, -bound, bound);
  }
}

void check_sizes(const char* layer, int64_t input_size, int64_t hidden_size) {
  detail::check_non_negative(layer, "input_size", input_size);
  detail::check_positive(layer, "hidden_size", hidden_size);
}

}  // namespace

Tensor detail::rnn_step(RNNKind kind, const Tensor& xw, const Tensor& h, Tensor& c, const Tensor& weight_hh,
                        const Tensor& bias_hh) {
  const Tensor hw = linear(h, weight_hh, bias_hh);
  switch (kind) {
    case RNNKind::RNNTanh: return tanh(xw + hw);
    case RNNKind::RNNReLU: return relu(xw + hw);
    case RNNKind::LSTM: {
      const TensorList g = chunk(xw + hw, 4, -1);
      c = sigmoid(g[1]) * c + sigmoid(g[0]) * tanh(g[2]);
      return sigmoid(g[3]) * tanh(c);
    }
    case RNNKind::GRU: {
      const TensorList gx = chunk(xw, 3, -1), gh = chunk(hw, 3, -1);
      const Tensor r = sigmoid(gx[0] + gh[0]), z = sigmoid(gx[1] + gh[1]);
      const Tensor n = tanh(gx[2] + r * gh[2]);
      return (1.0 - z) * n + z * h;
    }
  }
  return Tensor();
}

// --- cells ---------------------------------------------------------------------------------------

RNNCellBase::RNNCellBase(const char* name, RNNKind kind, int64_t input_size, int64_t hidden_size, bool bias)
    : input_size(input_size), hidden_size(hidden_size), kind_(kind), name_(name) {
  check_sizes(name, input_size, hidden_size);
  const int64_t rows = gates_of(kind) * hidden_size;
  weight_ih = register_parameter("weight_ih", detail::new_tensor(name, {rows, input_size}));
  weight_hh = register_parameter("weight_hh", detail::new_tensor(name, {rows, hidden_size}));
  if (bias) {
    bias_ih = register_parameter("bias_ih", detail::new_tensor(name, {rows}));
    bias_hh = register_parameter("bias_hh", detail::new_tensor(name, {rows}));
  }
  reset_parameters();
}

void RNNCellBase::reset_parameters() { init_uniform({weight_ih, weight_hh, bias_ih, bias_hh}, hidden_size); }

std::string RNNCellBase::extra_repr() const {
  std::string s = std::to_string(input_size) + ", " + std::to_string(hidden_size);
  if (!bias_ih.defined()) s += ", bias=False";
  return s;
}

Tensor RNNCellBase::batched_input(const Tensor& x, bool& unbatched) const {
  const std::string n = name_;
  if (!x.defined()) throw Error(n + ": the input is an undefined tensor");
  if ((x.dim() != 1 && x.dim() != 2) || x.size(-1) != input_size) {
    throw ShapeError(n + ": expected an input [N, " + std::to_string(input_size) + "] or [" +
                     std::to_string(input_size) + "], got shape " + shape_str(x.sizes()));
  }
  unbatched = x.dim() == 1;
  return unbatched ? x.unsqueeze(0) : x;
}

Tensor RNNCellBase::batched_state(const Tensor& h, const Tensor& x, bool unbatched, const char* what) const {
  const Shape expected = unbatched ? Shape{hidden_size} : Shape{x.size(0), hidden_size};
  if (!h.defined()) return zeros({x.size(0), hidden_size}, TensorOptions(x.dtype(), x.device()));
  if (h.sizes() != expected) {
    throw ShapeError(std::string(name_) + ": " + what + " must be " + shape_str(expected) + " for input " +
                     shape_str(x.sizes()) + ", got " + shape_str(h.sizes()));
  }
  return unbatched ? h.unsqueeze(0) : h;
}

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, bool bias, RNNNonlinearity nonlinearity)
    : RNNCellBase("RNNCell", nonlinearity == RNNNonlinearity::ReLU ? RNNKind::RNNReLU : RNNKind::RNNTanh, input_size,
                  hidden_size, bias),
      nonlinearity(nonlinearity) {}

std::string RNNCell::extra_repr() const {
  return RNNCellBase::extra_repr() + (nonlinearity == RNNNonlinearity::ReLU ? ", nonlinearity=relu" : "");
}

Tensor RNNCellBase::hidden_step(const Tensor& x, const Tensor& h) {
  bool unbatched = false;
  const Tensor xb = batched_input(x, unbatched);
  Tensor unused;
  const Tensor out = detail::rnn_step(kind_, linear(xb, weight_ih, bias_ih), batched_state(h, xb, unbatched, "h"),
                                      unused, weight_hh, bias_hh);
  return unbatched ? out.squeeze(0) : out;
}

Tensor RNNCell::forward(const Tensor& x, const Tensor& h) { return hidden_step(x, h); }

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias)
    : RNNCellBase("LSTMCell", RNNKind::LSTM, input_size, hidden_size, bias) {}

TensorList LSTMCell::forward(const Tensor& x, const Tensor& h, const Tensor& c) {
  bool unbatched = false;
  const Tensor xb = batched_input(x, unbatched);
  if (h.defined() != c.defined()) throw Error("LSTMCell: h and c must be given together (or neither)");
  Tensor cell = batched_state(c, xb, unbatched, "c");
  const Tensor out = detail::rnn_step(kind_, linear(xb, weight_ih, bias_ih), batched_state(h, xb, unbatched, "h"), cell,
                                      weight_hh, bias_hh);
  return unbatched ? TensorList{out.squeeze(0), cell.squeeze(0)} : TensorList{out, cell};
}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, bool bias)
    : RNNCellBase("GRUCell", RNNKind::GRU, input_size, hidden_size, bias) {}

Tensor GRUCell::forward(const Tensor& x, const Tensor& h) { return hidden_step(x, h); }

// --- sequence layers -----------------------------------------------------------------------------

RNNBase::RNNBase(const char* name, RNNKind kind, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
                 bool batch_first, double dropout, bool bidirectional, int64_t proj_size)
    : input_size(input_size),
      hidden_size(hidden_size),
      num_layers(num_layers),
      bias(bias),
      batch_first(batch_first),
      dropout(dropout),
      bidirectional(bidirectional),
      proj_size(proj_size),
      kind_(kind),
      name_(name) {
  check_sizes(name, input_size, hidden_size);
  detail::check_positive(name, "num_layers", num_layers);
  if (proj_size < 0 || (proj_size > 0 && proj_size >= hidden_size)) {
    throw Error(std::string(name) + ": proj_size must be non-negative and smaller than hidden_size " +
                std::to_string(hidden_size) + ", got " + std::to_string(proj_size));
  }
  if (!(dropout >= 0.0 && dropout <= 1.0)) {
    throw Error(std::string(name) + ": dropout must be in [0, 1], got " + detail::py_float(dropout));
  }
  const int64_t rows = gates_of(kind) * hidden_size, directions = bidirectional ? 2 : 1;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    const int64_t in = layer == 0 ? input_size : state_size() * directions;
    for (int64_t d = 0; d < directions; ++d) {
      const std::string suffix = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      TensorList w{register_parameter("weight_ih" + suffix, detail::new_tensor(name, {rows, in})),
                   register_parameter("weight_hh" + suffix, detail::new_tensor(name, {rows, state_size()})), Tensor(),
                   Tensor(), Tensor()};
      if (bias) {
        w[2] = register_parameter("bias_ih" + suffix, detail::new_tensor(name, {rows}));
        w[3] = register_parameter("bias_hh" + suffix, detail::new_tensor(name, {rows}));
      }
      if (proj_size > 0)
        w[4] = register_parameter("weight_hr" + suffix, detail::new_tensor(name, {proj_size, hidden_size}));
      weights_.push_back(std::move(w));
    }
  }
  reset_parameters();
}

void RNNBase::reset_parameters() {
  for (const TensorList& w : weights_) init_uniform(w, hidden_size);
}

TensorList RNNBase::layer_parameters(int64_t layer, int64_t direction) const {
  const int64_t directions = bidirectional ? 2 : 1;
  if (layer < 0 || layer >= num_layers || direction < 0 || direction >= directions) {
    throw IndexError(std::string(name_) + ": no layer " + std::to_string(layer) + " direction " +
                     std::to_string(direction) + " (" + std::to_string(num_layers) + " layers, " +
                     std::to_string(directions) + " directions)");
  }
  return weights_[static_cast<size_t>(layer * directions + direction)];
}

std::string RNNBase::extra_repr() const {
  std::string s = std::to_string(input_size) + ", " + std::to_string(hidden_size);
  if (proj_size != 0) s += ", proj_size=" + std::to_string(proj_size);
  if (num_layers != 1) s += ", num_layers=" + std::to_string(num_layers);
  if (!bias) s += ", bias=False";
  if (batch_first) s += ", batch_first=True";
  if (dropout != 0.0) s += ", dropout=" + detail::py_float(dropout);
  if (bidirectional) s += ", bidirectional=True";
  return s;
}

Tensor RNNBase::initial_state(const Tensor& s, const Shape& shape, const Tensor& like, const char* what,
                              const Shape& input_shape) const {
  if (!s.defined()) return zeros(shape, TensorOptions(like.dtype(), like.device()));
  if (s.sizes() != shape) {
    throw ShapeError(std::string(name_) + ": " + what + " must be " + shape_str(shape) + " for input " +
                     shape_str(input_shape) + ", got " + shape_str(s.sizes()));
  }
  return s;
}

RNNOutput RNNBase::run(const Tensor& input, const Tensor& h0, const Tensor& c0) {
  const std::string n = name_;
  if (!input.defined()) throw Error(n + ": the input is an undefined tensor");
  if ((input.dim() != 2 && input.dim() != 3) || input.size(-1) != input_size) {
    throw ShapeError(n + ": expected an input " + (batch_first ? "[N, L, " : "[L, N, ") + std::to_string(input_size) +
                     "] or [L, " + std::to_string(input_size) + "], got shape " + shape_str(input.sizes()));
  }
  const bool unbatched = input.dim() == 2;
  // [L, N, input] from here on.
  const Tensor x = unbatched ? input.unsqueeze(1) : batch_first ? input.transpose(0, 1) : input;
  const int64_t states = num_layers * (bidirectional ? 2 : 1);
  const bool lstm = kind_ == RNNKind::LSTM;
  if (lstm && h0.defined() != c0.defined()) throw Error(n + ": h0 and c0 must be given together (or neither)");
  auto initial = [&](const Tensor& s, int64_t size, const char* what) {
    const Shape shape = unbatched ? Shape{states, size} : Shape{states, x.size(1), size};
    const Tensor t = initial_state(s, shape, x, what, input.sizes());
    return unbatched ? t.unsqueeze(1) : t;
  };
  const Tensor h_init = initial(h0, state_size(), "h0"), c_init = lstm ? initial(c0, hidden_size, "c0") : Tensor();
  RNNOutput out = run_layers(x, h_init, c_init, Tensor());
  out.output = unbatched ? out.output.squeeze(1) : batch_first ? out.output.transpose(0, 1) : out.output;
  if (unbatched) {
    out.h_n = out.h_n.squeeze(1);
    if (lstm) out.c_n = out.c_n.squeeze(1);
  }
  return out;
}

RNNOutput RNNBase::run_layers(Tensor x, const Tensor& h_init, const Tensor& c_init, const Tensor& active) {
  const int64_t steps = x.size(0), batch = x.size(1), directions = bidirectional ? 2 : 1;
  const bool lstm = kind_ == RNNKind::LSTM;
  TensorList h_last, c_last;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    TensorList outputs;  // per direction, [L, N, hidden]
    for (int64_t d = 0; d < directions; ++d) {
      const TensorList& w = weights_[static_cast<size_t>(layer * directions + d)];
      const int64_t state = layer * directions + d;
      // The input's product with weight_ih for every step at once: [L, N, gates * hidden].
      const Tensor xw = linear(x, w[0], w[2]);
      Tensor h = h_init.select(0, state), c = lstm ? c_init.select(0, state) : Tensor();
      TensorList hs(static_cast<size_t>(steps));
      for (int64_t i = 0; i < steps; ++i) {
        const int64_t t = d == 0 ? i : steps - 1 - i;
        Tensor c_next = c;
        Tensor h_next = detail::rnn_step(kind_, xw.select(0, t), h, c_next, w[1], w[3]);
        if (w[4].defined()) h_next = linear(h_next, w[4]);  // the LSTM's projection to proj_size
        if (active.defined()) {
          // A sequence that has ended (or, in reverse, not begun) keeps its state.
          const Tensor on = active.select(0, t);
          h = where(on, h_next, h);
          if (lstm) c = where(on, c_next, c);
        } else {
          h = h_next;
          c = c_next;
        }
        hs[static_cast<size_t>(t)] = h;
      }
      outputs.push_back(steps > 0 ? stack(hs, 0)
                                  : zeros({0, batch, state_size()}, TensorOptions(x.dtype(), x.device())));
      h_last.push_back(h);
      if (lstm) c_last.push_back(c);
    }
    x = directions == 2 ? cat(outputs, 2) : outputs[0];
    if (dropout > 0.0 && is_training() && layer + 1 < num_layers) x = kiln::dropout(x, dropout, true);
  }
  RNNOutput out;
  out.output = x;
  out.h_n = stack(h_last, 0);
  if (lstm) out.c_n = stack(c_last, 0);
  return out;
}

namespace {

// A PackedSequence's checks: data at least 1-d, batch_sizes positive and non-increasing and
// summing to data's rows, the indices empty or permutations of the batch, inverse to each other.
void check_packed(const char* op, const PackedSequence& p) {
  const std::string o(op);
  if (!p.data.defined() || p.data.dim() == 0) {
    throw ShapeError(o + ": the packed data must be [sum of the lengths, *], got " +
                     (p.data.defined() ? shape_str(p.data.sizes()) : std::string("an undefined tensor")));
  }
  if (p.batch_sizes.empty()) throw ShapeError(o + ": the packed sequence has no steps (batch_sizes is empty)");
  int64_t total = 0;
  for (size_t t = 0; t < p.batch_sizes.size(); ++t) {
    const int64_t b = p.batch_sizes[t];
    if (b <= 0 || (t > 0 && b > p.batch_sizes[t - 1])) {
      throw ShapeError(o + ": batch_sizes must be positive and non-increasing, got " + shape_str(p.batch_sizes));
    }
    total += b;
  }
  if (total != p.data.size(0)) {
    throw ShapeError(o + ": batch_sizes " + shape_str(p.batch_sizes) + " sum to " + std::to_string(total) +
                     ", the data has " + std::to_string(p.data.size(0)) + " rows");
  }
  const size_t batch = static_cast<size_t>(p.batch_sizes[0]);
  if (p.sorted_indices.empty() && p.unsorted_indices.empty()) return;
  bool ok = p.sorted_indices.size() == batch && p.unsorted_indices.size() == batch;
  for (size_t i = 0; ok && i < batch; ++i) {
    const int64_t s = p.sorted_indices[i];
    ok = s >= 0 && s < static_cast<int64_t>(batch) &&
         p.unsorted_indices[static_cast<size_t>(s)] == static_cast<int64_t>(i);
  }
  if (!ok) {
    throw IndexError(o + ": sorted_indices " + shape_str(p.sorted_indices) + " and unsorted_indices " +
                     shape_str(p.unsorted_indices) + " must be inverse permutations of the batch of " +
                     std::to_string(batch));
  }
}

// Where each packed row sits in a padded batch [steps, batch, *] flattened to [steps * batch, *]
// (the batch in sorted order): t * batch + i for i < batch_sizes[t], int64 on `device`.
Tensor packed_positions(const std::vector<int64_t>& batch_sizes, Device device) {
  std::vector<int64_t> at;
  const int64_t batch = batch_sizes[0];
  for (size_t t = 0; t < batch_sizes.size(); ++t) {
    for (int64_t i = 0; i < batch_sizes[t]; ++i) at.push_back(static_cast<int64_t>(t) * batch + i);
  }
  return tensor(at).to(device);
}

Tensor index_tensor(const std::vector<int64_t>& v, Device device) { return tensor(v).to(device); }

// The packed data as a padded batch [steps, batch, *] in sorted order, `value` past each end
// (`positions`: packed_positions of its batch sizes).
Tensor padded_sorted(const PackedSequence& p, const Tensor& positions, int64_t steps, double value) {
  const int64_t batch = p.batch_sizes[0];
  Shape flat = p.data.sizes();
  flat[0] = steps * batch;
  Shape shape = p.data.sizes();
  shape[0] = batch;
  shape.insert(shape.begin(), steps);
  const Tensor fill = full(flat, value, TensorOptions(p.data.dtype(), p.data.device()));
  return index_copy(fill, 0, positions, p.data).reshape(shape);
}

}  // namespace

RNNPackedOutput RNNBase::run(const PackedSequence& input, const Tensor& h0, const Tensor& c0) {
  const std::string n = name_;
  check_packed(name_, input);
  if (input.data.dim() != 2 || input.data.size(1) != input_size) {
    throw ShapeError(n + ": expected packed data [sum of the lengths, " + std::to_string(input_size) + "], got " +
                     shape_str(input.data.sizes()));
  }
  const bool lstm = kind_ == RNNKind::LSTM;
  if (lstm && h0.defined() != c0.defined()) throw Error(n + ": h0 and c0 must be given together (or neither)");
  const int64_t steps = static_cast<int64_t>(input.batch_sizes.size()), batch = input.batch_sizes[0];
  const Device device = input.data.device();
  const int64_t states = num_layers * (bidirectional ? 2 : 1);
  const bool sorted = input.sorted_indices.empty();
  // Initial states come in the batch's order; the layers run in the sorted one.
  auto initial = [&](const Tensor& s, int64_t size, const char* what) {
    const Tensor t = initial_state(s, {states, batch, size}, input.data, what, input.data.sizes());
    return sorted || !s.defined() ? t : index_select(t, 1, index_tensor(input.sorted_indices, device));
  };
  // Sequence i runs at step t while i < batch_sizes[t] (the sorted order puts the running first).
  const Tensor active = lt(arange(0, batch, 1, TensorOptions(DType::Int64, device)).unsqueeze(0),
                           index_tensor(input.batch_sizes, device).unsqueeze(1))
                            .unsqueeze(2);
  const Tensor h_init = initial(h0, state_size(), "h0"), c_init = lstm ? initial(c0, hidden_size, "c0") : Tensor();
  const Tensor positions = packed_positions(input.batch_sizes, device);
  const RNNOutput padded = run_layers(padded_sorted(input, positions, steps, 0.0), h_init, c_init, active);
  RNNPackedOutput out;
  out.output = input;
  out.output.data = index_select(padded.output.reshape({steps * batch, padded.output.size(2)}), 0, positions);
  auto in_batch_order = [&](const Tensor& t) {
    return sorted ? t : index_select(t, 1, index_tensor(input.unsorted_indices, device));
  };
  out.h_n = in_batch_order(padded.h_n);
  if (lstm) out.c_n = in_batch_order(padded.c_n);
  return out;
}

RNN::RNN(int64_t input_size, int64_t hidden_size, int64_t num_layers, RNNNonlinearity nonlinearity, bool bias,
         bool batch_first, double dropout, bool bidirectional)
    : RNNBase("RNN", nonlinearity == RNNNonlinearity::ReLU ? RNNKind::RNNReLU : RNNKind::RNNTanh, input_size,
              hidden_size, num_layers, bias, batch_first, dropout, bidirectional),
      nonlinearity(nonlinearity) {}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first, double dropout,
           bool bidirectional, int64_t proj_size)
    : RNNBase("LSTM", RNNKind::LSTM, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
              proj_size) {}

GRU::GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first, double dropout,
         bool bidirectional)
    : RNNBase("GRU", RNNKind::GRU, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional) {}

Tensor pad_sequence(const TensorList& sequences, bool batch_first, double padding_value, PaddingSide side) {
  const char* op = "pad_sequence";
  if (sequences.empty()) throw Error(std::string(op) + ": no sequences to pad");
  int64_t longest = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Tensor& s = sequences[i];
    if (!s.defined() || s.dim() == 0) {
      throw ShapeError(std::string(op) + ": sequence " + std::to_string(i) + " must be [L, *], got " +
                       (s.defined() ? shape_str(s.sizes()) : std::string("an undefined tensor")));
    }
    const Tensor& first = sequences[0];
    const Shape trailing(s.sizes().begin() + 1, s.sizes().end());
    if (trailing != Shape(first.sizes().begin() + 1, first.sizes().end()) || s.dtype() != first.dtype() ||
        s.device() != first.device()) {
      throw ShapeError(std::string(op) + ": sequence " + std::to_string(i) + " (" + shape_str(s.sizes()) + ", " +
                       dtype_name(s.dtype()) + " on " + s.device().str() + ") differs from sequence 0 (" +
                       shape_str(first.sizes()) + ", " + dtype_name(first.dtype()) + " on " + first.device().str() +
                       ") in its trailing shape, dtype or device");
    }
    longest = std::max(longest, s.size(0));
  }
  TensorList padded;
  padded.reserve(sequences.size());
  for (const Tensor& s : sequences) {
    // F.pad's pairs run from the last dim: zeros for the trailing dims, then the length's.
    Shape pads(static_cast<size_t>(2 * s.dim()), 0);
    const int64_t missing = longest - s.size(0);
    pads[pads.size() - (side == PaddingSide::Right ? 1 : 2)] = missing;
    padded.push_back(missing == 0 ? s : pad(s, pads, PadMode::Constant, padding_value));
  }
  return stack(padded, batch_first ? 0 : 1);
}

TensorList unpad_sequence(const Tensor& padded, const std::vector<int64_t>& lengths, bool batch_first) {
  const char* op = "unpad_sequence";
  if (!padded.defined() || padded.dim() < 2) {
    throw ShapeError(std::string(op) + ": padded must be [L, B, *] or [B, L, *], got " +
                     (padded.defined() ? shape_str(padded.sizes()) : std::string("an undefined tensor")));
  }
  const int64_t batch = padded.size(batch_first ? 0 : 1), steps = padded.size(batch_first ? 1 : 0);
  if (static_cast<int64_t>(lengths.size()) != batch) {
    throw ShapeError(std::string(op) + ": " + std::to_string(lengths.size()) + " lengths for a batch of " +
                     std::to_string(batch) + " (padded " + shape_str(padded.sizes()) + ")");
  }
  TensorList out;
  out.reserve(lengths.size());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = lengths[static_cast<size_t>(b)];
    if (n < 0 || n > steps) {
      throw ShapeError(std::string(op) + ": length " + std::to_string(n) + " of sequence " + std::to_string(b) +
                       " is outside [0, " + std::to_string(steps) + "] (padded " + shape_str(padded.sizes()) + ")");
    }
    out.push_back(padded.select(batch_first ? 0 : 1, b).narrow(0, 0, n));
  }
  return out;
}

PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first,
                                    bool enforce_sorted) {
  const std::string op = "pack_padded_sequence";
  if (!input.defined() || input.dim() < 2) {
    throw ShapeError(op + ": input must be [T, B, *] or [B, T, *], got " +
                     (input.defined() ? shape_str(input.sizes()) : std::string("an undefined tensor")));
  }
  const Tensor x = batch_first ? input.transpose(0, 1) : input;  // [T, B, *]
  const int64_t steps = x.size(0), batch = x.size(1);
  if (static_cast<int64_t>(lengths.size()) != batch || batch == 0) {
    throw ShapeError(op + ": " + std::to_string(lengths.size()) + " lengths for a batch of " + std::to_string(batch) +
                     " (input " + shape_str(input.sizes()) + ")");
  }
  for (size_t b = 0; b < lengths.size(); ++b) {
    if (lengths[b] < 1 || lengths[b] > steps) {
      throw ShapeError(op + ": length " + std::to_string(lengths[b]) + " of sequence " + std::to_string(b) +
                       " is outside [1, " + std::to_string(steps) + "] (input " + shape_str(input.sizes()) + ")");
    }
    if (enforce_sorted && b > 0 && lengths[b] > lengths[b - 1]) {
      throw Error(op + ": lengths " + shape_str(lengths) +
                  " are not in decreasing order; sort the batch or pass enforce_sorted = false");
    }
  }
  PackedSequence p;
  std::vector<int64_t> order(lengths.size());
  for (size_t b = 0; b < order.size(); ++b) order[b] = static_cast<int64_t>(b);
  if (!enforce_sorted) {
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return lengths[static_cast<size_t>(a)] > lengths[static_cast<size_t>(b)];
    });
    p.sorted_indices = order;
    p.unsorted_indices.assign(order.size(), 0);
    for (size_t i = 0; i < order.size(); ++i)
      p.unsorted_indices[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  }
  const int64_t longest = lengths[static_cast<size_t>(order[0])];
  for (int64_t t = 0; t < longest; ++t) {
    int64_t running = 0;
    for (const int64_t len : lengths) running += len > t ? 1 : 0;
    p.batch_sizes.push_back(running);
  }
  const Tensor ordered = enforce_sorted ? x : index_select(x, 1, tensor(order).to(x.device()));
  Shape flat = x.sizes();
  flat.erase(flat.begin());
  flat[0] = steps * batch;
  p.data = index_select(ordered.reshape(flat), 0, packed_positions(p.batch_sizes, x.device()));
  return p;
}

std::pair<Tensor, std::vector<int64_t>> pad_packed_sequence(const PackedSequence& sequence, bool batch_first,
                                                            double padding_value, std::optional<int64_t> total_length) {
  const char* op = "pad_packed_sequence";
  check_packed(op, sequence);
  const int64_t longest = static_cast<int64_t>(sequence.batch_sizes.size()), batch = sequence.batch_sizes[0];
  const int64_t steps = total_length.value_or(longest);
  if (steps < longest) {
    throw ShapeError(std::string(op) + ": total_length " + std::to_string(steps) + " is less than the longest length " +
                     std::to_string(longest));
  }
  Tensor padded =
      padded_sorted(sequence, packed_positions(sequence.batch_sizes, sequence.data.device()), steps, padding_value);
  std::vector<int64_t> lengths(static_cast<size_t>(batch), 0);
  for (const int64_t running : sequence.batch_sizes) {
    for (int64_t i = 0; i < running; ++i) {
      const size_t b = sequence.sorted_indices.empty()
                           ? static_cast<size_t>(i)
                           : static_cast<size_t>(sequence.sorted_indices[static_cast<size_t>(i)]);
      ++lengths[b];
    }
  }
  if (!sequence.unsorted_indices.empty()) {
    padded = index_select(padded, 1, tensor(sequence.unsorted_indices).to(padded.device()));
  }
  return {batch_first ? padded.transpose(0, 1) : padded, lengths};
}

PackedSequence pack_sequence(const TensorList& sequences, bool enforce_sorted) {
  std::vector<int64_t> lengths;
  for (const Tensor& s : sequences) lengths.push_back(s.defined() && s.dim() > 0 ? s.size(0) : 0);
  return pack_padded_sequence(pad_sequence(sequences), lengths, false, enforce_sorted);
}

TensorList unpack_sequence(const PackedSequence& sequence) {
  auto [padded, lengths] = pad_packed_sequence(sequence);
  return unpad_sequence(padded, lengths);
}

}  // namespace kiln::nn

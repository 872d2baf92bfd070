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
                 bool batch_first, double dropout, bool bidirectional)
    : input_size(input_size),
      hidden_size(hidden_size),
      num_layers(num_layers),
      bias(bias),
      batch_first(batch_first),
      dropout(dropout),
      bidirectional(bidirectional),
      kind_(kind),
      name_(name) {
  check_sizes(name, input_size, hidden_size);
  detail::check_positive(name, "num_layers", num_layers);
  if (!(dropout >= 0.0 && dropout <= 1.0)) {
    throw Error(std::string(name) + ": dropout must be in [0, 1], got " + detail::py_float(dropout));
  }
  const int64_t rows = gates_of(kind) * hidden_size, directions = bidirectional ? 2 : 1;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    const int64_t in = layer == 0 ? input_size : hidden_size * directions;
    for (int64_t d = 0; d < directions; ++d) {
      const std::string suffix = "_l" + std::to_string(layer) + (d == 1 ? "_reverse" : "");
      TensorList w{register_parameter("weight_ih" + suffix, detail::new_tensor(name, {rows, in})),
                   register_parameter("weight_hh" + suffix, detail::new_tensor(name, {rows, hidden_size})), Tensor(),
                   Tensor()};
      if (bias) {
        w[2] = register_parameter("bias_ih" + suffix, detail::new_tensor(name, {rows}));
        w[3] = register_parameter("bias_hh" + suffix, detail::new_tensor(name, {rows}));
      }
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
  if (num_layers != 1) s += ", num_layers=" + std::to_string(num_layers);
  if (!bias) s += ", bias=False";
  if (batch_first) s += ", batch_first=True";
  if (dropout != 0.0) s += ", dropout=" + detail::py_float(dropout);
  if (bidirectional) s += ", bidirectional=True";
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
  Tensor x = unbatched ? input.unsqueeze(1) : batch_first ? input.transpose(0, 1) : input;
  const int64_t steps = x.size(0), batch = x.size(1), directions = bidirectional ? 2 : 1;
  const Shape state_shape =
      unbatched ? Shape{num_layers * directions, hidden_size} : Shape{num_layers * directions, batch, hidden_size};
  auto initial = [&](const Tensor& s, const char* what) {
    if (!s.defined()) {
      return zeros({num_layers * directions, batch, hidden_size}, TensorOptions(x.dtype(), x.device()));
    }
    if (s.sizes() != state_shape) {
      throw ShapeError(n + ": " + what + " must be " + shape_str(state_shape) + " for input " +
                       shape_str(input.sizes()) + ", got " + shape_str(s.sizes()));
    }
    return unbatched ? s.unsqueeze(1) : s;
  };
  const bool lstm = kind_ == RNNKind::LSTM;
  if (lstm && h0.defined() != c0.defined()) throw Error(n + ": h0 and c0 must be given together (or neither)");
  const Tensor h_init = initial(h0, "h0"), c_init = lstm ? initial(c0, "c0") : Tensor();
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
        h = detail::rnn_step(kind_, xw.select(0, t), h, c, w[1], w[3]);
        hs[static_cast<size_t>(t)] = h;
      }
      outputs.push_back(steps > 0 ? stack(hs, 0)
                                  : zeros({0, batch, hidden_size}, TensorOptions(x.dtype(), x.device())));
      h_last.push_back(h);
      if (lstm) c_last.push_back(c);
    }
    x = directions == 2 ? cat(outputs, 2) : outputs[0];
    if (dropout > 0.0 && is_training() && layer + 1 < num_layers) x = kiln::dropout(x, dropout, true);
  }
  RNNOutput out;
  out.output = unbatched ? x.squeeze(1) : batch_first ? x.transpose(0, 1) : x;
  out.h_n = stack(h_last, 0);
  if (lstm) out.c_n = stack(c_last, 0);
  if (unbatched) {
    out.h_n = out.h_n.squeeze(1);
    if (lstm) out.c_n = out.c_n.squeeze(1);
  }
  return out;
}

RNN::RNN(int64_t input_size, int64_t hidden_size, int64_t num_layers, RNNNonlinearity nonlinearity, bool bias,
         bool batch_first, double dropout, bool bidirectional)
    : RNNBase("RNN", nonlinearity == RNNNonlinearity::ReLU ? RNNKind::RNNReLU : RNNKind::RNNTanh, input_size,
              hidden_size, num_layers, bias, batch_first, dropout, bidirectional),
      nonlinearity(nonlinearity) {}

LSTM::LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias, bool batch_first, double dropout,
           bool bidirectional)
    : RNNBase("LSTM", RNNKind::LSTM, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional) {}

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

}  // namespace kiln::nn

// PyTorch's recurrent layers: the Elman RNN (tanh or ReLU), the LSTM and the GRU, as cells (one
// step) and as multi-layer, optionally bidirectional sequence layers, with PyTorch's parameter
// names, shapes, gate orders and init, so state dicts map 1:1. Each is composed of linear and
// elementwise ops, so autograd, autocast and both devices come with them: a layer runs one matrix
// product of the whole sequence with weight_ih, then one step per time step (its product with
// weight_hh, then the gates). There is no fused cuDNN kernel behind them. Batches of sequences of
// several lengths run packed (PackedSequence, below): each sequence's steps stop at its own end,
// and the reverse direction starts there.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace kiln::nn {

enum class RNNNonlinearity : uint8_t { Tanh, ReLU };

// What a cell's gates are: the RNN's one (tanh or ReLU), the LSTM's four (input, forget, cell,
// output) or the GRU's three (reset, update, new).
enum class RNNKind : uint8_t { RNNTanh, RNNReLU, LSTM, GRU };

namespace detail {
// One step of a cell of `kind`: the new hidden state (and, for the LSTM, the new cell state in
// `c`), from xw = x weight_ih^T + bias_ih (precomputed) and h, c.
Tensor rnn_step(RNNKind kind, const Tensor& xw, const Tensor& h, Tensor& c, const Tensor& weight_hh,
                const Tensor& bias_hh);
}  // namespace detail

// What the cells share: weight_ih [gates * hidden, input], weight_hh [gates * hidden, hidden],
// bias_ih and bias_hh [gates * hidden] (bias = false drops both), all ~ uniform(-1/sqrt(hidden),
// 1/sqrt(hidden)) as PyTorch's reset_parameters. Inputs [N, input] or, unbatched, [input].
class RNNCellBase : public Module {
 public:
  std::string extra_repr() const override;
  void reset_parameters();

  int64_t input_size, hidden_size;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;

 protected:
  RNNCellBase(const char* name, RNNKind kind, int64_t input_size, int64_t hidden_size, bool bias);
  // x checked and batched ([1, input] for [input]); h (or a zero state) likewise; `unbatched` says
  // which the caller gave.
  Tensor batched_input(const Tensor& x, bool& unbatched) const;
  Tensor batched_state(const Tensor& h, const Tensor& x, bool unbatched, const char* what) const;
  // One step of a cell whose state is h alone (RNNCell's, GRUCell's).
  Tensor hidden_step(const Tensor& x, const Tensor& h);

  RNNKind kind_;
  const char* name_;
};

// h' = tanh (or relu) of x weight_ih^T + bias_ih + h weight_hh^T + bias_hh.
class RNNCell : public RNNCellBase {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true,
          RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh);
  std::string type_name() const override { return "RNNCell"; }
  std::string extra_repr() const override;
  // h undefined: zeros.
  Tensor forward(const Tensor& x, const Tensor& h = Tensor());
  Tensor operator()(const Tensor& x, const Tensor& h = Tensor()) {
    run_forward_pre_hooks();
    return forward(x, h);
  }

  RNNNonlinearity nonlinearity;
};

// The LSTM step: gates i, f, g, o (in that order in the weights' rows); c' = f c + i g,
// h' = o tanh(c').
class LSTMCell : public RNNCellBase {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  std::string type_name() const override { return "LSTMCell"; }
  // h and c undefined: zeros. Returns {h', c'}.
  TensorList forward(const Tensor& x, const Tensor& h = Tensor(), const Tensor& c = Tensor());
  TensorList operator()(const Tensor& x, const Tensor& h = Tensor(), const Tensor& c = Tensor()) {
    run_forward_pre_hooks();
    return forward(x, h, c);
  }
};

// The GRU step: gates r, z, n (in that order); n = tanh(x W_in^T + b_in + r (h W_hn^T + b_hn)),
// h' = (1 - z) n + z h.
class GRUCell : public RNNCellBase {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  std::string type_name() const override { return "GRUCell"; }
  Tensor forward(const Tensor& x, const Tensor& h = Tensor());
  Tensor operator()(const Tensor& x, const Tensor& h = Tensor()) {
    run_forward_pre_hooks();
    return forward(x, h);
  }
};

// What a sequence layer returns: the last layer's hidden state at every step, [L, N, D * hidden]
// ([N, L, D * hidden] with batch_first, [L, D * hidden] unbatched; D = 2 when bidirectional, the
// forward direction's half first), and every layer and direction's final hidden state h_n
// [num_layers * D, N, hidden] (layer-major, forward before reverse); c_n likewise for the LSTM,
// undefined otherwise. (With an LSTM's proj_size P, output and h_n have P in place of hidden.)
struct RNNOutput {
  Tensor output, h_n, c_n;
};

// torch.nn.utils.rnn.PackedSequence: a batch of sequences of several lengths without padding. data
// [sum of the lengths, *] holds step 0 of every sequence, then step 1 of those still running, and
// so on, the sequences in order of decreasing length (ties in batch order); batch_sizes[t] counts
// the sequences running at step t. sorted_indices[i] is the batch position of the i-th sequence in
// that order (empty when the batch came sorted: enforce_sorted), unsorted_indices its inverse.
struct PackedSequence {
  Tensor data;
  std::vector<int64_t> batch_sizes, sorted_indices, unsorted_indices;
};

// What a sequence layer returns for a packed input: the output packed as the input (same
// batch_sizes and indices), and h_n (c_n) in the input's batch order, each sequence's state after
// its own last step.
struct RNNPackedOutput {
  PackedSequence output;
  Tensor h_n, c_n;
};

// The multi-layer sequence layers (PyTorch's RNNBase): layer k > 0 reads layer k - 1's output
// (both directions), with dropout between layers in training (not after the last). Parameters per
// layer k and direction: weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}, with the
// suffix "_reverse" for the reverse direction, as PyTorch names them. An LSTM with proj_size P > 0
// (PyTorch's LSTM with projections) also has weight_hr_l{k} [P, hidden]: each step's h is
// projected to P values, so h, the output and h_n carry P per direction, weight_hh is
// [4 hidden, P] and layer k > 0 reads D * P inputs; the cell state keeps `hidden`.
class RNNBase : public Module {
 public:
  std::string extra_repr() const override;
  void reset_parameters();
  // The parameters of layer `layer` and direction `direction` (0 forward, 1 reverse):
  // {weight_ih, weight_hh, bias_ih, bias_hh, weight_hr} (biases undefined without bias, weight_hr
  // without proj_size).
  TensorList layer_parameters(int64_t layer, int64_t direction) const;

  int64_t input_size, hidden_size, num_layers;
  bool bias, batch_first;
  double dropout;
  bool bidirectional;
  int64_t proj_size;  // 0: none (the LSTM's alone can be positive)

 protected:
  RNNBase(const char* name, RNNKind kind, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
          bool batch_first, double dropout, bool bidirectional, int64_t proj_size = 0);
  // The size of h per direction: proj_size, or hidden_size without projections.
  int64_t state_size() const { return proj_size > 0 ? proj_size : hidden_size; }
  // The whole sequence through every layer; h0 and c0 (c0 the LSTM's) undefined mean zeros.
  RNNOutput run(const Tensor& input, const Tensor& h0, const Tensor& c0);
  // The same for a packed batch: h0 and c0 [num_layers * D, B, *] in the batch's order.
  RNNPackedOutput run(const PackedSequence& input, const Tensor& h0, const Tensor& c0);
  // x [L, N, input] through every layer from the states h_init, c_init [num_layers * D, N,
  // hidden]; with `active` (bool [L, N, 1]) a step leaves the states of the inactive sequences as
  // they were. Returns the last layer's output and every layer and direction's final h (and c).
  RNNOutput run_layers(Tensor x, const Tensor& h_init, const Tensor& c_init, const Tensor& active);
  // h0 or c0 checked against `shape` ([num_layers * D, batch, state_size()] for h, hidden for c;
  // errors name `what` and the input's shape), or zeros of it in like's dtype and device.
  Tensor initial_state(const Tensor& s, const Shape& shape, const Tensor& like, const char* what,
                       const Shape& input_shape) const;

  RNNKind kind_;
  const char* name_;
  std::vector<TensorList> weights_;  // per layer * directions + direction
};

class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1,
      RNNNonlinearity nonlinearity = RNNNonlinearity::Tanh, bool bias = true, bool batch_first = false,
      double dropout = 0.0, bool bidirectional = false);
  std::string type_name() const override { return "RNN"; }
  RNNOutput forward(const Tensor& input, const Tensor& h0 = Tensor()) { return run(input, h0, Tensor()); }
  RNNOutput operator()(const Tensor& input, const Tensor& h0 = Tensor()) {
    run_forward_pre_hooks();
    return forward(input, h0);
  }
  RNNPackedOutput forward(const PackedSequence& input, const Tensor& h0 = Tensor()) { return run(input, h0, Tensor()); }
  RNNPackedOutput operator()(const PackedSequence& input, const Tensor& h0 = Tensor()) {
    run_forward_pre_hooks();
    return forward(input, h0);
  }

  RNNNonlinearity nonlinearity;
};

class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = false,
       double dropout = 0.0, bool bidirectional = false, int64_t proj_size = 0);
  std::string type_name() const override { return "LSTM"; }
  RNNOutput forward(const Tensor& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) {
    return run(input, h0, c0);
  }
  RNNOutput operator()(const Tensor& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) {
    run_forward_pre_hooks();
    return forward(input, h0, c0);
  }
  RNNPackedOutput forward(const PackedSequence& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) {
    return run(input, h0, c0);
  }
  RNNPackedOutput operator()(const PackedSequence& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) {
    run_forward_pre_hooks();
    return forward(input, h0, c0);
  }
};

class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = false,
      double dropout = 0.0, bool bidirectional = false);
  std::string type_name() const override { return "GRU"; }
  RNNOutput forward(const Tensor& input, const Tensor& h0 = Tensor()) { return run(input, h0, Tensor()); }
  RNNOutput operator()(const Tensor& input, const Tensor& h0 = Tensor()) {
    run_forward_pre_hooks();
    return forward(input, h0);
  }
  RNNPackedOutput forward(const PackedSequence& input, const Tensor& h0 = Tensor()) { return run(input, h0, Tensor()); }
  RNNPackedOutput operator()(const PackedSequence& input, const Tensor& h0 = Tensor()) {
    run_forward_pre_hooks();
    return forward(input, h0);
  }
};

// Which end of a sequence pad_sequence pads.
enum class PaddingSide : uint8_t { Right, Left };

// torch.nn.utils.rnn.pad_sequence: sequences [L_i, *] (one dtype, device and trailing shape) padded
// with padding_value to the longest L and stacked: [L, B, *], or [B, L, *] with batch_first. Right
// padding puts each sequence first, Left last. Differentiable in the sequences.
Tensor pad_sequence(const TensorList& sequences, bool batch_first = false, double padding_value = 0.0,
                    PaddingSide side = PaddingSide::Right);
// torch.nn.utils.rnn.unpad_sequence: the first lengths[b] steps of each sequence of a right-padded
// batch [L, B, *] ([B, L, *] with batch_first), as views. lengths has one value per sequence, each
// in [0, L].
TensorList unpad_sequence(const Tensor& padded, const std::vector<int64_t>& lengths, bool batch_first = false);

// torch.nn.utils.rnn.pack_padded_sequence: the first lengths[b] steps of each sequence of a padded
// batch [T, B, *] ([B, T, *] with batch_first) packed. Lengths in [1, T], one per sequence;
// enforce_sorted asks for them in decreasing order (an Error otherwise), else the batch is sorted
// by length (stably) and the order kept in sorted_indices. Differentiable in input.
PackedSequence pack_padded_sequence(const Tensor& input, const std::vector<int64_t>& lengths, bool batch_first = false,
                                    bool enforce_sorted = true);
// torch.nn.utils.rnn.pad_packed_sequence: the padded batch [T, B, *] ([B, T, *] with batch_first)
// in the original batch order, padding_value past each sequence's end, T the longest length or
// total_length (not less than it), and the lengths. Differentiable in the packed data.
std::pair<Tensor, std::vector<int64_t>> pad_packed_sequence(const PackedSequence& sequence, bool batch_first = false,
                                                            double padding_value = 0.0,
                                                            std::optional<int64_t> total_length = std::nullopt);
// torch.nn.utils.rnn.pack_sequence and unpack_sequence: sequences [L_i, *] packed, and back.
PackedSequence pack_sequence(const TensorList& sequences, bool enforce_sorted = true);
TensorList unpack_sequence(const PackedSequence& sequence);

}  // namespace kiln::nn

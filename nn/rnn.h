// PyTorch's recurrent layers: the Elman RNN (tanh or ReLU), the LSTM and the GRU, as cells (one
// step) and as multi-layer, optionally bidirectional sequence layers, with PyTorch's parameter
// names, shapes, gate orders and init, so state dicts map 1:1. Each is composed of linear and
// elementwise ops, so autograd, autocast and both devices come with them: a layer runs one matrix
// product of the whole sequence with weight_ih, then one step per time step (its product with
// weight_hh, then the gates). There is no fused cuDNN kernel behind them; proj_size (LSTM's
// projections) and packed sequences are not supported: batches of sequences of several lengths
// are padded (pad_sequence, below) and their lengths kept beside them.
#pragma once

#include <cstdint>
#include <string>
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
  Tensor operator()(const Tensor& x, const Tensor& h = Tensor()) { return forward(x, h); }

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
  Tensor operator()(const Tensor& x, const Tensor& h = Tensor()) { return forward(x, h); }
};

// What a sequence layer returns: the last layer's hidden state at every step, [L, N, D * hidden]
// ([N, L, D * hidden] with batch_first, [L, D * hidden] unbatched; D = 2 when bidirectional, the
// forward direction's half first), and every layer and direction's final hidden state h_n
// [num_layers * D, N, hidden] (layer-major, forward before reverse); c_n likewise for the LSTM,
// undefined otherwise.
struct RNNOutput {
  Tensor output, h_n, c_n;
};

// The multi-layer sequence layers (PyTorch's RNNBase): layer k > 0 reads layer k - 1's output
// (both directions), with dropout between layers in training (not after the last). Parameters per
// layer k and direction: weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}, with the
// suffix "_reverse" for the reverse direction, as PyTorch names them.
class RNNBase : public Module {
 public:
  std::string extra_repr() const override;
  void reset_parameters();
  // The parameters of layer `layer` and direction `direction` (0 forward, 1 reverse):
  // {weight_ih, weight_hh, bias_ih, bias_hh} (biases undefined without bias).
  TensorList layer_parameters(int64_t layer, int64_t direction) const;

  int64_t input_size, hidden_size, num_layers;
  bool bias, batch_first;
  double dropout;
  bool bidirectional;

 protected:
  RNNBase(const char* name, RNNKind kind, int64_t input_size, int64_t hidden_size, int64_t num_layers, bool bias,
          bool batch_first, double dropout, bool bidirectional);
  // The whole sequence through every layer; h0 and c0 (c0 the LSTM's) undefined mean zeros.
  RNNOutput run(const Tensor& input, const Tensor& h0, const Tensor& c0);

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
  RNNOutput operator()(const Tensor& input, const Tensor& h0 = Tensor()) { return forward(input, h0); }

  RNNNonlinearity nonlinearity;
};

class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = false,
       double dropout = 0.0, bool bidirectional = false);
  std::string type_name() const override { return "LSTM"; }
  RNNOutput forward(const Tensor& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) {
    return run(input, h0, c0);
  }
  RNNOutput operator()(const Tensor& input, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor()) {
    return forward(input, h0, c0);
  }
};

class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, int64_t num_layers = 1, bool bias = true, bool batch_first = false,
      double dropout = 0.0, bool bidirectional = false);
  std::string type_name() const override { return "GRU"; }
  RNNOutput forward(const Tensor& input, const Tensor& h0 = Tensor()) { return run(input, h0, Tensor()); }
  RNNOutput operator()(const Tensor& input, const Tensor& h0 = Tensor()) { return forward(input, h0); }
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

}  // namespace kiln::nn

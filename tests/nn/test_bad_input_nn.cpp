// The bad-input sweep of the nn layer: layer and model constructors with negative,
// absurd or overflowing sizes, forwards of wrong shapes and dtypes, module bookkeeping, init and
// optimizers with bad hyperparameters. Each must fail with a kiln error naming the layer or
// function and the offending value, never a crash or a std::bad_alloc. The runner is
// tests/core/bad_input.h; the core layer's rows are in tests/core/test_bad_input.cpp.
#include "tests/core/bad_input.h"

#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "core/kiln.h"
#include "nn/attention.h"
#include "nn/encoder_decoder.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "nn/optim/adam.h"
#include "nn/optim/adamw.h"
#include "nn/optim/clip.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/reduce_on_plateau.h"
#include "nn/optim/sgd.h"
#include "nn/resnet.h"
#include "nn/transformer.h"

using namespace kiln;
using namespace kiln::nn;
using kiln::bad_input::Expect;
using kiln::bad_input::Table;
using kiln::bad_input::f32, kiln::bad_input::i64, kiln::bad_input::kInf, kiln::bad_input::kNaN, kiln::bad_input::kP62;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kP40 = int64_t{1} << 40;

Tensor param(const Shape& s) { return zeros(s).set_requires_grad(true); }

GPTConfig tiny_gpt() {
  GPTConfig c;
  c.vocab_size = 16;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

// A module that registers what a row asks it to.
class Bare : public Module {
 public:
  std::string type_name() const override { return "Bare"; }
};

void layer_rows(Table& t) {
  t.add("Linear: negative in_features", Expect::Error, {"Linear", "in_features", "-1"}, [] { Linear l(-1, 3); });
  t.add("Linear: negative out_features", Expect::Error, {"Linear", "out_features", "-2"}, [] { Linear l(3, -2); });
  t.add("Linear: weight count overflows", Expect::Shape, {"Linear", "4611686018427387904"},
        [] { Linear l(kP62, kP62); });
  t.add("Linear: INT64_MAX x 2 weight", Expect::Shape, {"Linear", "9223372036854775807"}, [] { Linear l(kMax, 2); });
  t.add("Linear: 4 EiB weight", Expect::OutOfMemory, {"Linear", "1073741824"},
        [] { Linear l(int64_t{1} << 30, int64_t{1} << 30); });
  t.add("Linear forward: feature mismatch", Expect::Shape, {"linear", "3 features"}, [] {
    Linear l(4, 2);
    (void)l.forward(f32({2, 3}));
  });
  t.add("Linear forward: int input", Expect::DType, {"linear", "int64"}, [] {
    Linear l(4, 2);
    (void)l.forward(i64({2, 4}));
  });
  t.add("Linear forward: undefined input", Expect::Error, {"linear", "undefined"}, [] {
    Linear l(4, 2);
    (void)l.forward(Tensor());
  });

  t.add("Embedding: negative num_embeddings", Expect::Error, {"Embedding", "num_embeddings", "-1"},
        [] { Embedding e(-1, 4); });
  t.add("Embedding: negative embedding_dim", Expect::Error, {"Embedding", "embedding_dim", "-1"},
        [] { Embedding e(4, -1); });
  t.add("Embedding: byte count overflows", Expect::Shape, {"Embedding", "4611686018427387904"},
        [] { Embedding e(kP62, 8); });
  t.add("Embedding: count wraps", Expect::Shape, {"Embedding", "67280421310721"},
        [] { Embedding e(274177, 67280421310721); });
  t.add("Embedding: 64 TiB table", Expect::OutOfMemory, {"Embedding", "1099511627776"}, [] { Embedding e(kP40, 16); });
  t.add("Embedding forward: index past the end", Expect::Index, {"embedding", "4"}, [] {
    Embedding e(4, 2);
    (void)e.forward(tensor({int64_t{4}}));
  });
  t.add("Embedding forward: negative index", Expect::Index, {"embedding", "-1"}, [] {
    Embedding e(4, 2);
    (void)e.forward(tensor({int64_t{-1}}));
  });
  t.add("Embedding forward: float indices", Expect::DType, {"embedding", "float32"}, [] {
    Embedding e(4, 2);
    (void)e.forward(f32({2}));
  });

  t.add("Conv2d: negative in_channels", Expect::Error, {"Conv2d", "in_channels", "-1"}, [] {
    Conv2d c(-1, 2, {3, 3});
  });
  t.add("Conv2d: negative out_channels", Expect::Error, {"Conv2d", "out_channels", "-4"}, [] {
    Conv2d c(1, -4, {3, 3});
  });
  t.add("Conv2d: kernel 0", Expect::Error, {"Conv2d", "kernel_size", "(0, 3)"}, [] { Conv2d c(1, 2, {0, 3}); });
  t.add("Conv2d: stride 0", Expect::Error, {"Conv2d", "stride"}, [] { Conv2d c(1, 2, {3, 3}, {0, 1}); });
  t.add("Conv2d: negative padding", Expect::Error, {"Conv2d", "padding", "(-1, 0)"}, [] {
    Conv2d c(1, 2, {3, 3}, {1, 1}, {-1, 0});
  });
  t.add("Conv2d: dilation 0", Expect::Error, {"Conv2d", "dilation"}, [] {
    Conv2d c(1, 2, {3, 3}, {1, 1}, {0, 0}, {1, 0});
  });
  t.add("Conv2d: groups 0", Expect::Error, {"Conv2d", "groups", "0"}, [] {
    Conv2d c(2, 2, {3, 3}, {1, 1}, {0, 0}, {1, 1}, 0);
  });
  t.add("Conv2d: groups do not divide", Expect::Error, {"Conv2d", "groups 2"}, [] {
    Conv2d c(3, 2, {3, 3}, {1, 1}, {0, 0}, {1, 1}, 2);
  });
  t.add("Conv2d: weight count overflows", Expect::Shape, {"Conv2d", "1099511627776"}, [] {
    Conv2d c(kP40, kP40, {3, 3});
  });
  t.add("Conv2d: kernel count overflows", Expect::Shape, {"Conv2d", "1099511627776"}, [] {
    Conv2d c(1, 1, {kP40, kP40});
  });
  t.add("Conv2d: 1 EiB weight", Expect::OutOfMemory, {"Conv2d", "1048576"}, [] {
    Conv2d c(int64_t{1} << 20, int64_t{1} << 20, {16, 16});
  });
  t.add("Conv2d forward: 3-d input", Expect::Shape, {"conv2d", "[1, 4, 4]"}, [] {
    Conv2d c(1, 2, {3, 3});
    (void)c.forward(f32({1, 4, 4}));
  });
  t.add("ConvTranspose2d: negative in_channels", Expect::Error, {"ConvTranspose2d", "in_channels", "-1"}, [] {
    ConvTranspose2d c(-1, 2, {3, 3});
  });
  t.add("ConvTranspose2d: kernel 0", Expect::Error, {"ConvTranspose2d", "kernel_size", "(3, 0)"}, [] {
    ConvTranspose2d c(1, 2, {3, 0});
  });
  t.add("ConvTranspose2d: negative padding", Expect::Error, {"ConvTranspose2d", "padding", "(0, -2)"}, [] {
    ConvTranspose2d c(1, 2, {3, 3}, {1, 1}, {0, -2});
  });
  t.add("ConvTranspose2d: output_padding at the stride", Expect::Error, {"ConvTranspose2d", "output_padding (1, 0)"},
        [] {
          ConvTranspose2d c(1, 2, {3, 3}, {1, 1}, {0, 0}, {1, 0});
        });
  t.add("ConvTranspose2d: dilation 0", Expect::Error, {"ConvTranspose2d", "dilation"}, [] {
    ConvTranspose2d c(1, 2, {3, 3}, {1, 1}, {0, 0}, {0, 0}, 1, true, {0, 1});
  });
  t.add("ConvTranspose2d: weight count overflows", Expect::Shape, {"ConvTranspose2d", "1099511627776"}, [] {
    ConvTranspose2d c(kP40, kP40, {3, 3});
  });
  t.add("ConvTranspose2d forward: channel mismatch", Expect::Shape,
        {"conv_transpose2d", "input has 3 channels", "[1, 3, 4, 4]"}, [] {
          ConvTranspose2d c(2, 2, {3, 3});
          (void)c.forward(f32({1, 3, 4, 4}));
        });
  t.add("ConvTranspose2d forward: output_size beyond the stride's reach", Expect::Shape,
        {"ConvTranspose2d", "output size 9", "7 to 8"}, [] {
          ConvTranspose2d c(1, 1, {3, 3}, {2, 2}, {1, 1});
          (void)c.forward(f32({1, 1, 4, 4}), {9, 7});
        });
  t.add("ConvTranspose1d: groups 0", Expect::Error, {"ConvTranspose1d", "groups", "0"},
        [] { ConvTranspose1d c(2, 2, 3, 1, 0, 0, 0); });
  t.add("ConvTranspose1d forward: 4-d input", Expect::Shape, {"conv_transpose1d", "[1, 2, 4, 4]"}, [] {
    ConvTranspose1d c(2, 2, 3);
    (void)c.forward(f32({1, 2, 4, 4}));
  });
  t.add("Conv2d forward: channel mismatch", Expect::Shape, {"conv2d", "3 channels"}, [] {
    Conv2d c(1, 2, {3, 3});
    (void)c.forward(f32({1, 3, 4, 4}));
  });

  t.add("BatchNorm2d: 0 features", Expect::Error, {"BatchNorm2d", "num_features", "0"}, [] { BatchNorm2d b(0); });
  t.add("BatchNorm2d: negative features", Expect::Error, {"BatchNorm2d", "-5"}, [] { BatchNorm2d b(-5); });
  t.add("BatchNorm2d: negative eps", Expect::Error, {"BatchNorm2d", "eps", "-1"}, [] { BatchNorm2d b(4, -1.0); });
  t.add("BatchNorm2d: NaN eps", Expect::Error, {"BatchNorm2d", "eps", "nan"}, [] { BatchNorm2d b(4, kNaN); });
  t.add("BatchNorm2d: momentum 1.5", Expect::Error, {"BatchNorm2d", "momentum", "1.5"},
        [] { BatchNorm2d b(4, 1e-5, 1.5); });
  t.add("BatchNorm2d: byte count overflows", Expect::Shape, {"BatchNorm2d", "4611686018427387904"},
        [] { BatchNorm2d b(kP62); });
  t.add("BatchNorm2d forward: 3-d input", Expect::Shape, {"BatchNorm2d", "[2, 4, 4]"}, [] {
    BatchNorm2d b(2);
    (void)b.forward(f32({2, 4, 4}));
  });
  t.add("BatchNorm2d forward: channel mismatch", Expect::Shape, {"BatchNorm2d", "3 channels"}, [] {
    BatchNorm2d b(2);
    (void)b.forward(f32({2, 3, 4, 4}));
  });
  t.add("BatchNorm2d forward: undefined input", Expect::Error, {"BatchNorm2d", "undefined"}, [] {
    BatchNorm2d b(2);
    (void)b.forward(Tensor());
  });

  t.add("MultiheadAttention: embed_dim not a multiple of num_heads", Expect::Error,
        {"MultiheadAttention", "embed_dim", "10", "num_heads 3"}, [] { MultiheadAttention m(10, 3); });
  t.add("MultiheadAttention: 3 * embed_dim overflows", Expect::Shape, {"MultiheadAttention", "too large"},
        [] { MultiheadAttention m(int64_t{1} << 62, 1); });
  t.add("MultiheadAttention: byte count overflows", Expect::Shape, {"MultiheadAttention"},
        [] { MultiheadAttention m(int64_t{1} << 32, 1); });
  t.add("MultiheadAttention: 768 TiB of weights", Expect::OutOfMemory, {"MultiheadAttention"},
        [] { MultiheadAttention m(int64_t{1} << 23, 1); });
  t.add("MultiheadAttention forward: 4-d query", Expect::Shape, {"MultiheadAttention", "[1, 2, 3, 8]"}, [] {
    MultiheadAttention m(8, 2);
    const Tensor x = f32({1, 2, 3, 8});
    (void)m.forward(x, x, x);
  });
  t.add("MultiheadAttention forward: int attn_mask", Expect::DType, {"MultiheadAttention", "attn_mask", "int64"}, [] {
    MultiheadAttention m(8, 2);
    const Tensor x = f32({3, 2, 8});
    (void)m.forward(x, x, x, Tensor(), true, i64({3, 3}));
  });
  t.add("MultiheadAttention forward: key_padding_mask of another length", Expect::Shape,
        {"MultiheadAttention", "key_padding_mask", "[2, 3]", "[2, 5]"}, [] {
          MultiheadAttention m(8, 2);
          const Tensor x = f32({3, 2, 8});
          (void)m.forward(x, x, x, zeros({2, 5}, TensorOptions(DType::Bool)));
        });
  t.add("TransformerEncoderLayer: dim_feedforward 0", Expect::Error, {"TransformerEncoderLayer", "dim_feedforward"},
        [] { TransformerEncoderLayer l(8, 2, {.dim_feedforward = 0}); });
  t.add("TransformerDecoder: no layers", Expect::Error, {"TransformerDecoder", "num_layers", "0"},
        [] { TransformerDecoder d(8, 2, 0); });
  t.add("Transformer forward: src and tgt batches differ", Expect::Shape, {"Transformer", "[5, 2, 8]", "[3, 4, 8]"},
        [] {
          Transformer m({.d_model = 8, .nhead = 2, .num_encoder_layers = 1, .num_decoder_layers = 1});
          (void)m.forward(f32({5, 2, 8}), f32({3, 4, 8}));
        });
  t.add("GroupNorm: num_groups 0", Expect::Error, {"GroupNorm", "num_groups (0)"}, [] { GroupNorm g(0, 4); });
  t.add("GroupNorm: channels overflow", Expect::Shape, {"GroupNorm", "[4611686018427387904]", "bytes"},
        [] { GroupNorm g(1, int64_t{1} << 62); });
  t.add("GroupNorm forward: a 1-d input", Expect::Shape, {"group_norm", "[N, C, *]", "[4]"}, [] {
    GroupNorm g(2, 4);
    (void)g.forward(f32({4}));
  });
  t.add("RMSNorm: NaN eps", Expect::Error, {"RMSNorm", "eps", "nan"}, [] { RMSNorm r(4, kNaN); });
  t.add("RMSNorm forward: wrong trailing dims", Expect::Shape, {"rms_norm", "[2, 3]", "[4]"}, [] {
    RMSNorm r(4);
    (void)r.forward(f32({2, 3}));
  });
  t.add("SiLU forward: int input", Expect::DType, {"silu", "int64"}, [] {
    SiLU s;
    (void)s.forward(i64({2}));
  });
  t.add("LayerNorm: no dims", Expect::Error, {"LayerNorm", "normalized_shape"}, [] { LayerNorm l(Shape{}); });
  t.add("LayerNorm: negative size", Expect::Error, {"LayerNorm", "-1"}, [] { LayerNorm l(Shape{-1}); });
  t.add("LayerNorm: negative eps", Expect::Error, {"LayerNorm", "eps", "-1"}, [] { LayerNorm l(4, -1.0); });
  t.add("LayerNorm: count overflows", Expect::Shape, {"LayerNorm", "4294967296"}, [] {
    LayerNorm l(Shape{int64_t{1} << 32, int64_t{1} << 32});
  });
  t.add("LayerNorm forward: shape mismatch", Expect::Shape, {"layer_norm", "[4]", "[2, 3]"}, [] {
    LayerNorm l(4);
    (void)l.forward(f32({2, 3}));
  });

  t.add("Dropout: p 1.5", Expect::Error, {"Dropout", "1.5"}, [] { Dropout d(1.5); });
  t.add("Dropout: p -0.5", Expect::Error, {"Dropout", "-0.5"}, [] { Dropout d(-0.5); });
  t.add("Dropout: NaN p", Expect::Error, {"Dropout", "nan"}, [] { Dropout d(kNaN); });
  t.add("Dropout forward: int input", Expect::DType, {"dropout", "int64"}, [] {
    Dropout d(0.5);
    (void)d.forward(i64({2}));
  });

  t.add("MaxPool2d: kernel 0", Expect::Error, {"MaxPool2d", "kernel_size"}, [] { MaxPool2d p({0, 2}); });
  t.add("MaxPool2d: negative stride", Expect::Error, {"MaxPool2d", "stride", "(-1, -1)"}, [] {
    MaxPool2d p({2, 2}, {-1, -1});
  });
  t.add("MaxPool2d: dilation 0", Expect::Error, {"MaxPool2d", "dilation"}, [] {
    MaxPool2d p({2, 2}, {0, 0}, {0, 0}, {0, 0});
  });
  t.add("MaxPool2d: negative padding", Expect::Error, {"MaxPool2d", "padding", "(-1, 0)"}, [] {
    MaxPool2d p({2, 2}, {0, 0}, {-1, 0});
  });
  t.add("MaxPool2d: padding over half the kernel", Expect::Error, {"MaxPool2d", "padding", "(2, 2)"}, [] {
    MaxPool2d p({3, 3}, {0, 0}, {2, 2});
  });
  t.add("MaxPool2d forward: 2-d input", Expect::Shape, {"max_pool2d", "[4, 4]"}, [] {
    MaxPool2d p({2, 2});
    (void)p.forward(f32({4, 4}));
  });
  t.add("AvgPool2d: kernel 0", Expect::Error, {"AvgPool2d", "kernel_size"}, [] { AvgPool2d p({2, 0}); });
  t.add("AvgPool2d: negative padding", Expect::Error, {"AvgPool2d", "padding", "(0, -1)"}, [] {
    AvgPool2d p({2, 2}, {0, 0}, {0, -1});
  });
  t.add("AvgPool2d: padding over half the kernel", Expect::Error, {"AvgPool2d", "padding", "(1, 1)"}, [] {
    AvgPool2d p({1, 1}, {0, 0}, {1, 1});
  });
  t.add("AdaptiveAvgPool2d: output 0", Expect::Error, {"AdaptiveAvgPool2d", "output_size", "(0, 0)"},
        [] { AdaptiveAvgPool2d p(0); });
  t.add("AdaptiveAvgPool2d: negative output", Expect::Error, {"AdaptiveAvgPool2d", "output_size", "(-1, 2)"}, [] {
    AdaptiveAvgPool2d p(Pair{-1, 2});
  });
  t.add("Flatten forward: start after end", Expect::Shape, {"flatten", "start_dim 2"}, [] {
    Flatten f(2, 0);
    (void)f.forward(f32({2, 3, 4}));
  });
  t.add("Flatten forward: dim out of range", Expect::Index, {"flatten", "5"}, [] {
    Flatten f(5);
    (void)f.forward(f32({2, 3}));
  });
  t.add("GELU forward: int input", Expect::DType, {"gelu", "int64"}, [] {
    GELU g;
    (void)g.forward(i64({2}));
  });
  t.add("ReLU forward: bool input", Expect::DType, {"relu", "bool"}, [] {
    ReLU r;
    (void)r.forward(zeros({2}, DType::Bool));
  });
}

void container_rows(Table& t) {
  t.add("Sequential: index past the end", Expect::Index, {"Sequential", "5", "1 modules"}, [] {
    Sequential s{std::make_shared<ReLU>()};
    (void)s[5];
  });
  t.add("Sequential: a null module", Expect::Error, {"Module", "null"}, [] {
    Sequential s;
    s.push_back(nullptr);
  });
  t.add("Sequential::at of the wrong type", Expect::Error, {"Sequential", "ReLU"}, [] {
    Sequential s{std::make_shared<ReLU>()};
    (void)s.at<Linear>(0);
  });
  t.add("ModuleList: index past the end", Expect::Index, {"ModuleList", "3"}, [] {
    ModuleList l;
    (void)l[3];
  });
  t.add("ModuleDict: missing key", Expect::Error, {"ModuleDict", "\"x\""}, [] {
    ModuleDict d;
    (void)d.at("x");
  });
  t.add("register_parameter: dotted name", Expect::Error, {"Module", "\"a.b\""},
        [] { Bare().register_parameter("a.b", f32({2})); });
  t.add("register_parameter: empty name", Expect::Error, {"Module", "non-empty"},
        [] { Bare().register_parameter("", f32({2})); });
  t.add("register_parameter: undefined", Expect::Error, {"Module", "\"w\"", "undefined"},
        [] { Bare().register_parameter("w", Tensor()); });
  t.add("register_parameter: twice", Expect::Error, {"Module", "\"w\"", "twice"}, [] {
    Bare b;
    b.register_parameter("w", f32({2}));
    b.register_parameter("w", f32({2}));
  });
  t.add("register_parameter: an int tensor", Expect::DType, {"Module", "\"w\"", "int64"},
        [] { Bare().register_parameter("w", i64({2})); });
  t.add("register_buffer: twice", Expect::Error, {"Module", "\"b\"", "twice"}, [] {
    Bare b;
    b.register_buffer("b", f32({2}));
    b.register_buffer("b", f32({2}));
  });
  t.add("set_parameter: unknown name", Expect::Error, {"Module", "\"nope\""},
        [] { Linear(2, 2).set_parameter("nope", f32({2})); });
  t.add("load_state_dict: missing key", Expect::Error, {"load_state_dict", "missing", "bias"}, [] {
    Linear l(2, 2);
    l.load_state_dict({{"weight", f32({2, 2})}});
  });
  t.add("load_state_dict: unexpected key", Expect::Error, {"load_state_dict", "unexpected", "extra"}, [] {
    Linear l(2, 2);
    l.load_state_dict({{"weight", f32({2, 2})}, {"bias", f32({2})}, {"extra", f32({1})}});
  });
  t.add("load_state_dict: shape mismatch", Expect::Error, {"load_state_dict", "weight", "[3, 2]"}, [] {
    Linear l(2, 2);
    l.load_state_dict({{"weight", f32({3, 2})}, {"bias", f32({2})}});
  });
  t.add("load_state_dict: undefined value", Expect::Error, {"load_state_dict", "weight", "undefined"}, [] {
    Linear l(2, 2);
    l.load_state_dict({{"weight", Tensor()}, {"bias", f32({2})}});
  });
  t.add("Module::to an int dtype", Expect::DType, {"Module::to", "int64"}, [] { Linear(2, 2).to(DType::Int64); });
}

void init_rows(Table& t) {
  t.add("calculate_fan_in_and_fan_out of a 1-d tensor", Expect::Shape, {"calculate_fan_in_and_fan_out", "[3]"},
        [] { (void)init::calculate_fan_in_and_fan_out(f32({3})); });
  t.add("calculate_fan_in_and_fan_out of undefined", Expect::Error, {"calculate_fan_in_and_fan_out", "undefined"},
        [] { (void)init::calculate_fan_in_and_fan_out(Tensor()); });
  t.add("kaiming_uniform_ of a 1-d tensor", Expect::Shape, {"kaiming_uniform_", "[3]"},
        [] { (void)init::kaiming_uniform_(f32({3})); });
  t.add("kaiming_uniform_ of undefined", Expect::Error, {"kaiming_uniform_", "undefined"},
        [] { (void)init::kaiming_uniform_(Tensor()); });
  t.add("xavier_uniform_ of a 1-d tensor", Expect::Shape, {"xavier_uniform_", "[3]"},
        [] { (void)init::xavier_uniform_(f32({3})); });
  t.add("xavier_normal_ of undefined", Expect::Error, {"xavier_normal_", "undefined"},
        [] { (void)init::xavier_normal_(Tensor()); });
  t.add("uniform_ with a > b", Expect::Error, {"uniform_", "low"}, [] { (void)init::uniform_(f32({2}), 1.0, 0.0); });
  t.add("uniform_ of undefined", Expect::Error, {"uniform_", "undefined"}, [] { (void)init::uniform_(Tensor()); });
  t.add("normal_ with negative std", Expect::Error, {"normal_", "std"},
        [] { (void)init::normal_(f32({2}), 0.0, -1.0); });
  t.add("zeros_ of undefined", Expect::Error, {"zeros_", "undefined"}, [] { (void)init::zeros_(Tensor()); });
  t.add("ones_ of undefined", Expect::Error, {"ones_", "undefined"}, [] { (void)init::ones_(Tensor()); });
  t.add("constant_ of undefined", Expect::Error, {"constant_", "undefined"},
        [] { (void)init::constant_(Tensor(), 1.0); });
  t.add("constant_ of an int tensor with a float", Expect::DType, {"constant_", "int64", "0.5"},
        [] { (void)init::constant_(i64({2}), 0.5); });
  t.add("trunc_normal_ with a >= b", Expect::Error, {"trunc_normal_", "a=2"},
        [] { (void)init::trunc_normal_(f32({2}), 0, 1, 2, 1); });
  t.add("trunc_normal_ with negative std", Expect::Error, {"trunc_normal_", "std"},
        [] { (void)init::trunc_normal_(f32({2}), 0, -1); });
  t.add("trunc_normal_ of an int tensor", Expect::DType, {"trunc_normal_", "int64"},
        [] { (void)init::trunc_normal_(i64({2})); });
  t.add("trunc_normal_ of undefined", Expect::Error, {"trunc_normal_", "undefined"},
        [] { (void)init::trunc_normal_(Tensor()); });
  t.add("trunc_normal_ with a NaN bound", Expect::Error, {"trunc_normal_", "nan"},
        [] { (void)init::trunc_normal_(f32({2}), 0, 1, kNaN, 1); });
}

void optim_rows(Table& t) {
  using optim::Adam;
  using optim::AdamW;
  using optim::ParamGroup;
  using optim::SGD;
  t.add("SGD: negative lr", Expect::Error, {"optimizer", "learning rate", "-0.1"}, [] { SGD o({param({2})}, -0.1); });
  // Values too small for six decimals are quoted as passed, not as "-0.000000".
  t.add("SGD: lr -1e-9", Expect::Error, {"optimizer", "learning rate", "got -1e-09"},
        [] { SGD o({param({2})}, -1e-9); });
  t.add("SGD: momentum -1e-7", Expect::Error, {"SGD", "momentum", "got -1e-07"},
        [] { SGD o({param({2})}, 0.1, -1e-7); });
  t.add("SGD: NaN lr", Expect::Error, {"optimizer", "learning rate", "nan"}, [] { SGD o({param({2})}, kNaN); });
  t.add("SGD: infinite lr", Expect::Error, {"optimizer", "learning rate", "inf"}, [] { SGD o({param({2})}, kInf); });
  t.add("SGD: negative weight_decay", Expect::Error, {"optimizer", "weight_decay", "-1"},
        [] { SGD o({param({2})}, 0.1, 0.0, 0.0, -1.0); });
  t.add("SGD: NaN weight_decay", Expect::Error, {"optimizer", "weight_decay", "nan"},
        [] { SGD o({param({2})}, 0.1, 0.0, 0.0, kNaN); });
  t.add("SGD: negative momentum", Expect::Error, {"SGD", "momentum", "-0.5"}, [] { SGD o({param({2})}, 0.1, -0.5); });
  t.add("SGD: NaN momentum", Expect::Error, {"SGD", "momentum", "nan"}, [] { SGD o({param({2})}, 0.1, kNaN); });
  t.add("SGD: NaN dampening", Expect::Error, {"SGD", "dampening", "nan"}, [] { SGD o({param({2})}, 0.1, 0.9, kNaN); });
  t.add("SGD: Nesterov without momentum", Expect::Error, {"SGD", "Nesterov"},
        [] { SGD o({param({2})}, 0.1, 0.0, 0.0, 0.0, true); });
  t.add("SGD: no parameters", Expect::Error, {"optimizer", "empty"}, [] { SGD o(TensorList{}, 0.1); });
  t.add("SGD: undefined parameter", Expect::Error, {"optimizer", "parameter 0", "undefined"},
        [] { SGD o({Tensor()}, 0.1); });
  t.add("SGD: int parameter", Expect::DType, {"optimizer", "parameter 0", "int64"}, [] { SGD o({i64({2})}, 0.1); });
  t.add("SGD: a parameter twice", Expect::Error, {"optimizer", "more than once"}, [] {
    Tensor p = param({2});
    SGD o({p, p}, 0.1);
  });
  t.add("SGD: a non-leaf parameter", Expect::Error, {"optimizer", "parameter 0", "leaf"},
        [] { SGD o({param({2}) * 2.0}, 0.1); });
  t.add("SGD: unknown group option", Expect::Error, {"SGD", "unknown option", "momentun"}, [] {
    ParamGroup g{{param({2})}, 0.1, 0.0, {{"momentun", 0.9}}};
    SGD o(std::vector<ParamGroup>{g});
  });
  t.add("AdamW: beta1 1", Expect::Error, {"AdamW", "betas", "(1, 0.999)"}, [] {
    AdamW o({param({2})}, 1e-3, {1.0, 0.999});
  });
  t.add("AdamW: negative beta2", Expect::Error, {"AdamW", "betas", "-0.1"}, [] {
    AdamW o({param({2})}, 1e-3, {0.9, -0.1});
  });
  t.add("AdamW: NaN beta1", Expect::Error, {"AdamW", "betas", "nan"}, [] {
    AdamW o({param({2})}, 1e-3, {kNaN, 0.999});
  });
  t.add("AdamW: negative eps", Expect::Error, {"AdamW", "eps", "-1"}, [] {
    AdamW o({param({2})}, 1e-3, {0.9, 0.999}, -1.0);
  });
  t.add("AdamW: eps -1e-12", Expect::Error, {"AdamW", "eps", "got -1e-12"}, [] {
    AdamW o({param({2})}, 1e-3, {0.9, 0.999}, -1e-12);
  });
  t.add("AdamW: NaN eps", Expect::Error, {"AdamW", "eps", "nan"}, [] {
    AdamW o({param({2})}, 1e-3, {0.9, 0.999}, kNaN);
  });
  t.add("AdamW: infinite eps", Expect::Error, {"AdamW", "eps", "inf"}, [] {
    AdamW o({param({2})}, 1e-3, {0.9, 0.999}, kInf);
  });
  t.add("AdamW: infinite weight_decay", Expect::Error, {"optimizer", "weight_decay", "inf"}, [] {
    AdamW o({param({2})}, 1e-3, {0.9, 0.999}, 1e-8, kInf);
  });
  t.add("AdamW: negative lr", Expect::Error, {"optimizer", "learning rate"}, [] { AdamW o({param({2})}, -1.0); });
  t.add("AdamW: group beta2 override 1.5", Expect::Error, {"AdamW", "betas", "1.5", "group 1"}, [] {
    ParamGroup a{{param({2})}, 0.1, 0.0, {}};
    ParamGroup b{{param({2})}, 0.1, 0.0, {{"beta2", 1.5}}};
    AdamW o(std::vector<ParamGroup>{a, b});
  });
  t.add("Adam: beta2 1", Expect::Error, {"Adam:", "betas", "(0.9, 1)"}, [] {
    Adam o({param({2})}, 1e-3, {0.9, 1.0}, 1e-8, 0.0, true);
  });
  t.add("Adam: NaN weight_decay", Expect::Error, {"optimizer", "weight_decay", "nan"}, [] {
    Adam o({param({2})}, 1e-3, {0.9, 0.999}, 1e-8, kNaN);
  });
  t.add("Adam: an option SGD has", Expect::Error, {"Adam", "momentum"}, [] {
    ParamGroup a{{param({2})}, 0.1, 0.0, {{"momentum", 0.9}}};
    Adam o(std::vector<ParamGroup>{a});
  });
  t.add("Optimizer::lr of a missing group", Expect::Index, {"lr", "group 5", "1 group"}, [] {
    SGD o({param({2})}, 0.1);
    (void)o.lr(5);
  });
  t.add("Optimizer::group past the end", Expect::Index, {"group", "7"}, [] {
    SGD o({param({2})}, 0.1);
    (void)o.group(7);
  });
  t.add("Optimizer::set_lr of a missing group", Expect::Index, {"set_lr", "group 3"}, [] {
    SGD o({param({2})}, 0.1);
    o.set_lr(3, 0.1);
  });
  t.add("Optimizer::set_lr negative", Expect::Error, {"set_lr", "-1"}, [] {
    SGD o({param({2})}, 0.1);
    o.set_lr(-1.0);
  });
  t.add("Optimizer::set_lr NaN", Expect::Error, {"set_lr", "nan"}, [] {
    SGD o({param({2})}, 0.1);
    o.set_lr(kNaN);
  });
  t.add("Optimizer::set_grad_scaling of int64", Expect::DType, {"set_grad_scaling", "int64"}, [] {
    SGD o({param({2})}, 0.1);
    o.set_grad_scaling(zeros({}, DType::Int64));
  });
  t.add("Optimizer::load_state_dict: missing step", Expect::Error, {"load_state_dict", "missing key", "\"step\""}, [] {
    SGD o({param({2})}, 0.1);
    o.load_state_dict({});
  });
  t.add("Optimizer::load_state_dict: float step", Expect::DType, {"load_state_dict", "\"step\"", "float32"}, [] {
    SGD o({param({2})}, 0.1);
    auto s = o.state_dict();
    s["step"] = zeros({});
    o.load_state_dict(s);
  });
  t.add("Optimizer::load_state_dict: unexpected key", Expect::Error, {"load_state_dict", "unexpected", "\"bogus\""},
        [] {
          SGD o({param({2})}, 0.1);
          auto s = o.state_dict();
          s["bogus"] = zeros({});
          o.load_state_dict(s);
        });
  t.add("Optimizer::load_state_dict: state of the wrong shape", Expect::Error, {"load_state_dict", "exp_avg", "[3]"},
        [] {
          AdamW o({param({2})}, 0.1);
          auto s = o.state_dict();
          s["state.0.exp_avg"] = zeros({3});
          s["state.0.exp_avg_sq"] = zeros({2});
          o.load_state_dict(s);
        });
  t.add("Optimizer::load_state_dict: undefined state", Expect::Error, {"load_state_dict", "exp_avg", "undefined"}, [] {
    AdamW o({param({2})}, 0.1);
    auto s = o.state_dict();
    s["state.0.exp_avg"] = Tensor();
    s["state.0.exp_avg_sq"] = zeros({2});
    o.load_state_dict(s);
  });
  t.add("Optimizer::load_state_dict: undefined step", Expect::Error, {"load_state_dict", "\"step\"", "undefined"}, [] {
    SGD o({param({2})}, 0.1);
    auto s = o.state_dict();
    s["step"] = Tensor();
    o.load_state_dict(s);
  });
  t.add("decay_groups: negative lr", Expect::Error, {"optimizer", "learning rate"}, [] {
    Linear l(2, 2);
    AdamW o(optim::decay_groups(l.named_parameters(), -1.0, 0.1));
  });
  t.add("clip_grad_norm_: negative max_norm", Expect::Error, {"clip_grad_norm_", "max_norm", "-1"},
        [] { (void)optim::clip_grad_norm_({param({2})}, -1.0); });
  t.add("clip_grad_norm_: norm_type 0", Expect::Error, {"clip_grad_norm_", "norm_type", "0"}, [] {
    Tensor p = param({2});
    p.set_grad(ones({2}));
    (void)optim::clip_grad_norm_({p}, 1.0, 0.0);
  });
  t.add("clip_grad_norm_: NaN max_norm", Expect::Error, {"clip_grad_norm_", "max_norm", "nan"},
        [] { (void)optim::clip_grad_norm_({param({2})}, kNaN); });
  t.add("clip_grads_with_norm_: a norm of shape [2]", Expect::Error, {"clip_grads_with_norm_", "0-d", "[2]"}, [] {
    Tensor p = param({2});
    p.set_grad(ones({2}));
    optim::clip_grads_with_norm_({p}, 1.0, ones({2}));
  });
  t.add("clip_grads_with_norm_: negative max_norm", Expect::Error, {"clip_grads_with_norm_", "max_norm", "-1"},
        [] { optim::clip_grads_with_norm_({param({2})}, -1.0, ones({})); });
  t.add("warmup_cosine_lr: warmup past total", Expect::Error, {"warmup_cosine_lr", "warmup_steps=10", "total_steps=5"},
        [] { (void)optim::warmup_cosine_lr(0, 0.1, 10, 5, 0.0); });
  t.add("warmup_cosine_lr: negative warmup", Expect::Error, {"warmup_cosine_lr", "-1"},
        [] { (void)optim::warmup_cosine_lr(0, 0.1, -1, 5, 0.0); });
  t.add("warmup_cosine_lr: NaN base_lr", Expect::Error, {"warmup_cosine_lr", "base_lr", "nan"},
        [] { (void)optim::warmup_cosine_lr(0, kNaN, 1, 5, 0.0); });
  t.add("step_lr: step_size 0", Expect::Error, {"step_lr", "step_size", "0"},
        [] { (void)optim::step_lr(0, 0.1, 0, 0.5); });
  t.add("step_lr: negative gamma", Expect::Error, {"step_lr", "gamma", "-0.5"},
        [] { (void)optim::step_lr(3, 0.1, 1, -0.5); });
  t.add("StepLR: gamma 0", Expect::Error, {"StepLR", "gamma"}, [] {
    SGD o({param({2})}, 0.1);
    optim::StepLR s(o, 0.1, 2, 0.0);
  });
  t.add("WarmupCosine: negative base_lr", Expect::Error, {"WarmupCosine", "base_lr"}, [] {
    SGD o({param({2})}, 0.1);
    optim::WarmupCosine s(o, -0.1, 1, 10);
  });
  t.add("polynomial_lr: NaN power", Expect::Error, {"polynomial_lr", "power", "nan"},
        [] { (void)optim::polynomial_lr(0, 0.1, 5, kNaN); });
  t.add("cosine_warm_restarts_lr: negative eta_min", Expect::Error, {"cosine_warm_restarts_lr", "eta_min", "-1"},
        [] { (void)optim::cosine_warm_restarts_lr(0, 0.1, 5, 1, -1.0); });
  t.add("OneCycleLR: infinite max_lr", Expect::Error, {"OneCycleLR", "max_lr", "inf"}, [] {
    SGD o({param({2})}, 0.1, 0.9);
    optim::OneCycleLR s(o, kInf, 100);
  });
  t.add("OneCycleLR: total_steps 0", Expect::Error, {"OneCycleLR", "total_steps", "0"}, [] {
    SGD o({param({2})}, 0.1, 0.9);
    optim::OneCycleLR s(o, 0.1, 0);
  });
  t.add("OneCycleLR: max_momentum 1", Expect::Error, {"OneCycleLR", "max_momentum", "1"}, [] {
    SGD o({param({2})}, 0.1, 0.9);
    optim::OneCycleOptions c;
    c.max_momentum = 1.0;
    optim::OneCycleLR s(o, 0.1, 100, c);
  });
  t.add("SequentialLR: no scheduler", Expect::Error, {"SequentialLR", "at least one"}, [] {
    SGD o({param({2})}, 0.1);
    optim::SequentialLR s(o, {}, {});
  });
  t.add("ReduceLROnPlateau: negative patience", Expect::Error, {"ReduceLROnPlateau", "patience", "-1"}, [] {
    SGD o({param({2})}, 0.1);
    optim::PlateauOptions p;
    p.patience = -1;
    optim::ReduceLROnPlateau r(o, p);
  });
  t.add("ReduceLROnPlateau: NaN threshold", Expect::Error, {"ReduceLROnPlateau", "threshold", "nan"}, [] {
    SGD o({param({2})}, 0.1);
    optim::PlateauOptions p;
    p.threshold = kNaN;
    optim::ReduceLROnPlateau r(o, p);
  });
  t.add("ReduceLROnPlateau::load_state_dict: float32 best", Expect::DType, {"load_state_dict", "best", "float32"}, [] {
    SGD o({param({2})}, 0.1);
    optim::ReduceLROnPlateau r(o);
    auto s = r.state_dict();
    s["best"] = zeros({});
    r.load_state_dict(s);
  });
  t.add("Optimizer::set_option of an unknown name", Expect::Error, {"set_option", "\"eps\"", "momentum"}, [] {
    SGD o({param({2})}, 0.1);
    o.set_option(0, "eps", 1e-8);
  });
  t.add("LRScheduler::set_step negative", Expect::Error, {"set_step", "-1"}, [] {
    SGD o({param({2})}, 0.1);
    optim::StepLR s(o, 0.1, 2);
    s.set_step(-1);
  });
}

void model_rows(Table& t) {
  t.add("GPTConfig: n_head 0", Expect::Error, {"GPTConfig", "n_head", "0"}, [] {
    GPTConfig c = tiny_gpt();
    c.n_head = 0;
    GPT g(c);
  });
  t.add("GPTConfig: n_embd not divisible by n_head", Expect::Error, {"GPTConfig", "n_embd 8", "n_head 3"}, [] {
    GPTConfig c = tiny_gpt();
    c.n_head = 3;
    GPT g(c);
  });
  t.add("GPTConfig: dropout 1", Expect::Error, {"GPTConfig", "dropout"}, [] {
    GPTConfig c = tiny_gpt();
    c.dropout = 1.0;
    GPT g(c);
  });
  t.add("GPTConfig: dropout -1e-9", Expect::Error, {"GPTConfig", "dropout", "got -1e-09"}, [] {
    GPTConfig c = tiny_gpt();
    c.dropout = -1e-9;
    GPT g(c);
  });
  t.add("GPTConfig: vocab_size 0", Expect::Error, {"GPTConfig", "vocab_size", "0"}, [] {
    GPTConfig c = tiny_gpt();
    c.vocab_size = 0;
    GPT g(c);
  });
  t.add("GPTConfig: negative n_layer", Expect::Error, {"GPTConfig", "n_layer", "-1"}, [] {
    GPTConfig c = tiny_gpt();
    c.n_layer = -1;
    GPT g(c);
  });
  t.add("GPTConfig: n_embd whose 4x overflows", Expect::Error, {"GPTConfig", "n_embd", "4611686018427387904"}, [] {
    GPTConfig c = tiny_gpt();
    c.n_embd = kP62;
    c.n_head = 1;
    MLP m(c);
  });
  t.add("GPTConfig: NaN dropout", Expect::Error, {"GPTConfig", "dropout", "nan"}, [] {
    GPTConfig c = tiny_gpt();
    c.dropout = kNaN;
    GPT g(c);
  });
  t.add("GPT: 2^62-token vocabulary", Expect::Shape, {"Embedding", "4611686018427387904"}, [] {
    GPTConfig c = tiny_gpt();
    c.vocab_size = kP62;
    GPT g(c);
  });
  t.add("GPT forward: 1-d idx", Expect::Shape, {"GPT", "[4]"}, [] {
    GPT g(tiny_gpt());
    (void)g.forward(i64({4}));
  });
  t.add("GPT forward: float idx", Expect::DType, {"GPT", "float32"}, [] {
    GPT g(tiny_gpt());
    (void)g.forward(f32({1, 4}));
  });
  t.add("GPT forward: longer than block_size", Expect::Shape, {"GPT", "length 9", "block_size is only 8"}, [] {
    GPT g(tiny_gpt());
    (void)g.forward(i64({1, 9}));
  });
  t.add("GPT forward: token past the vocabulary", Expect::Index, {"embedding", "16"}, [] {
    GPT g(tiny_gpt());
    (void)g.forward(full({1, 2}, 16, DType::Int64));
  });
  t.add("GPT loss: targets of another shape", Expect::Shape, {"GPT::loss", "[1, 3]", "[1, 2]"}, [] {
    GPT g(tiny_gpt());
    (void)g.loss(i64({1, 2}), i64({1, 3}));
  });
  t.add("GPT generate: temperature 0", Expect::Error, {"GPT::generate", "temperature"}, [] {
    GPT g(tiny_gpt());
    (void)g.generate(i64({1, 2}), 1, 0.0);
  });
  t.add("GPT generate: NaN temperature", Expect::Error, {"GPT::generate", "temperature", "nan"}, [] {
    GPT g(tiny_gpt());
    (void)g.generate(i64({1, 2}), 1, kNaN);
  });
  t.add("GPT generate: top_k 0", Expect::Error, {"GPT::generate", "top_k", "0"}, [] {
    GPT g(tiny_gpt());
    (void)g.generate(i64({1, 2}), 1, 1.0, 0);
  });
  t.add("GPT generate: negative max_new_tokens", Expect::Error, {"GPT::generate", "max_new_tokens", "-1"}, [] {
    GPT g(tiny_gpt());
    (void)g.generate(i64({1, 2}), -1);
  });
  t.add("GPT generate: empty prompt", Expect::Shape, {"GPT::generate", "[1, 0]"}, [] {
    GPT g(tiny_gpt());
    (void)g.generate(i64({1, 0}), 1);
  });
  t.add("CausalSelfAttention forward: wrong width", Expect::Shape, {"CausalSelfAttention", "[1, 2, 4]"}, [] {
    CausalSelfAttention a(tiny_gpt());
    (void)a.forward(f32({1, 2, 4}));
  });

  t.add("ResNet: stage width 0", Expect::Error, {"ResNet", "width 0"}, [] {
    ResNetConfig c;
    c.widths = {0, 4, 4};
    ResNet r(c);
  });
  t.add("ResNet: negative block count", Expect::Error, {"ResNet", "blocks -1"}, [] {
    ResNetConfig c;
    c.blocks = {1, -1, 1};
    ResNet r(c);
  });
  t.add("ResNet: widths and blocks of different lengths", Expect::Error, {"ResNet", "4 widths and 3 block counts"},
        [] {
          ResNetConfig c;
          c.widths = {4, 4, 4, 4};
          ResNet r(c);
        });
  t.add("ResNet: no stages", Expect::Error, {"ResNet", "0 widths"}, [] {
    ResNetConfig c;
    c.widths = {};
    c.blocks = {};
    ResNet r(c);
  });
  t.add("ResNet: negative in_channels", Expect::Error, {"ResNet", "in_channels", "-1"}, [] {
    ResNetConfig c;
    c.in_channels = -1;
    ResNet r(c);
  });
  t.add("ResNet: 0 classes", Expect::Error, {"ResNet", "num_classes", "0"}, [] {
    ResNetConfig c;
    c.num_classes = 0;
    ResNet r(c);
  });
  t.add("ResNet forward: wrong channels", Expect::Shape, {"ResNet", "[1, 1, 8, 8]"}, [] {
    ResNetConfig c;
    c.widths = {2, 2, 2};
    c.blocks = {1, 1, 1};
    ResNet r(c);
    (void)r.forward(f32({1, 1, 8, 8}));
  });
  t.add("BasicBlock: stride 0", Expect::Error, {"BasicBlock", "stride", "0"}, [] { BasicBlock b(2, 2, 0); });
  t.add("BasicBlock: negative channels", Expect::Error, {"BasicBlock", "-1"}, [] { BasicBlock b(-1, 2); });
  t.add("SmallCNN: image_size 6", Expect::Error, {"SmallCNN", "image_size", "6"}, [] {
    SmallCNNConfig c;
    c.image_size = 6;
    SmallCNN s(c);
  });
  t.add("SmallCNN: negative in_channels", Expect::Error, {"SmallCNN", "in_channels", "-1"}, [] {
    SmallCNNConfig c;
    c.in_channels = -1;
    SmallCNN s(c);
  });
  t.add("SmallCNN: negative hidden", Expect::Error, {"SmallCNN", "hidden", "-3"}, [] {
    SmallCNNConfig c;
    c.hidden = -3;
    SmallCNN s(c);
  });
  t.add("SmallCNN: image_size whose features overflow", Expect::Error, {"SmallCNN", "image_size", "4398046511104"}, [] {
    SmallCNNConfig c;
    c.image_size = int64_t{1} << 42;
    SmallCNN s(c);
  });
  t.add("SmallCNN: dropout 2", Expect::Error, {"Dropout", "2"}, [] {
    SmallCNNConfig c;
    c.dropout = 2.0;
    SmallCNN s(c);
  });
  t.add("SmallCNN forward: wrong image size", Expect::Shape, {"SmallCNN", "28x28", "[1, 1, 32, 32]"}, [] {
    SmallCNN s;
    (void)s.forward(f32({1, 1, 32, 32}));
  });
}

}  // namespace

TEST_CASE("bad-input sweep: nn", "[bad_input]") {
  Table table;
  layer_rows(table);
  container_rows(table);
  init_rows(table);
  optim_rows(table);
  model_rows(table);
  bad_input::run_table(table, 175);
}

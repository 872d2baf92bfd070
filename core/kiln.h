// Everything a kiln user needs from the core layer, in one include.
#pragma once

#include "core/autograd.h"
#include "core/device.h"
#include "core/gradcheck.h"
#include "core/ops/attention.h"
#include "core/ops/conv.h"
#include "core/ops/elementwise.h"
#include "core/ops/factory.h"
#include "core/ops/linalg.h"
#include "core/ops/nn.h"
#include "core/ops/reduce.h"
#include "core/ops/shape.h"
#include "core/random.h"
#include "core/scalar.h"
#include "core/tensor.h"
#include "kernels/error.h"

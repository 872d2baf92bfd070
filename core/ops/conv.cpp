// placeholder: implemented by the issue-4 work
#include "core/ops/conv.h"

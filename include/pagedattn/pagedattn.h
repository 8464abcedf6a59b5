// Umbrella header of the pagedattn public API.
#pragma once

#include "pagedattn/attention.h"
#include "pagedattn/convert.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/reference.h"
#include "pagedattn/select.h"
#include "pagedattn/status.h"
#include "pagedattn/tensor.h"
#include "pagedattn/version.h"
#include "pagedattn/write_kv.h"

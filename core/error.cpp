#include "error.h"

namespace fl {

const char* status_name(fl_status_t status) {
  switch (status) {
    case FL_OK: return "FL_OK";
    case FL_ERR_INVALID_ARGUMENT: return "FL_ERR_INVALID_ARGUMENT";
    case FL_ERR_OUT_OF_MEMORY: return "FL_ERR_OUT_OF_MEMORY";
    case FL_ERR_NOT_SUPPORTED: return "FL_ERR_NOT_SUPPORTED";
    case FL_ERR_DEVICE: return "FL_ERR_DEVICE";
    case FL_ERR_NO_DEVICE: return "FL_ERR_NO_DEVICE";
    case FL_ERR_VERSION: return "FL_ERR_VERSION";
    case FL_ERR_INTERNAL: return "FL_ERR_INTERNAL";
    default: return "FL_ERR_UNKNOWN";
  }
}

}  // namespace fl

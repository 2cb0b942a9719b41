#include "fl_abi_layout_check.h"
int fl_abi_layout_check_cpp() { return FL_ABI_MAJOR; }

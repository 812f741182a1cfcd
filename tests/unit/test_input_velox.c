#include "test_util.h"
int main(void) { return test_finish("unit_input_velox"); }

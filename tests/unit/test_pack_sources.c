/* Placeholder replaced by the pack source tests. */
#include "test_util.h"

int main(void)
{
    CHECK(0);
    return test_finish("unit_pack_sources");
}

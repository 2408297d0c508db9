// A C test compiled as C++ (the header's C++ path under the same checks): the build names the
// file with -DNB_TEST_SOURCE="test_x.c".
#include NB_TEST_SOURCE

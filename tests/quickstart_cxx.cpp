// examples/quickstart.c compiled as C++: the README's program must work from C++ unchanged.
#include "../examples/quickstart.c"

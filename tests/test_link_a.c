/* Two translation units include the header; only this one defines the implementation.
   Linking them together proves there are no duplicate symbols. */
#define NORMBLOCKS_IMPLEMENTATION
#include "normblocks.h"
#include <stdio.h>

int link_b_run(void); /* in test_link_b.c */

int main(void) {
    int failed = link_b_run() != 0;
    failed += nb_result_string(NB_OK)[0] != 'o';
    printf("%d passed, %d failed\n", 2 - failed, failed);
    return failed != 0;
}

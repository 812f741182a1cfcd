/* The start-up baseline: a C program that prints one line and exits,
 * linked like any program (libc only). */
#include <stdio.h>

int main(void)
{
    puts("plain 0.1.0");
    return 0;
}

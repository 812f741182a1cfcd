/* The baseline linked against libcrypto and asking it one question: what
 * libcrypto alone adds to a program's start-up. */
#include <openssl/crypto.h>
#include <stdio.h>

int main(void)
{
    printf("plain with libcrypto %lx\n", (unsigned long)OpenSSL_version_num());
    return 0;
}

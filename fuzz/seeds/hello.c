#include <stdio.h>
#include <stdlib.h>
static int sq(int x) { return x * x; }
__attribute__((noinline)) int work(int n) { if (__builtin_expect(n > 1000, 0)) { fprintf(stderr, "big %d\n", n); abort(); } return sq(n) + 1; }
int main(int argc, char **argv) { printf("%d\n", work(argc)); return argv[0][0] == 'x'; }

#include <string.h>
int lib_len(const char *s) { return (int)strlen(s); }
int lib_twice(const char *s) { return 2 * lib_len(s) + (int)strcspn(s, "x"); }

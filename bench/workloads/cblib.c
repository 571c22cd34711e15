/* (g), the library half: a plain C function that calls back into its
 * caller. Built as a C shared library: it has unwind tables (.eh_frame) but
 * no C++ symbols and no exception table of its own. */
__attribute__((noinline)) int cb_apply(int (*fn)(int), int x)
{
	int r = fn(x);
	return r * 2 + x;
}

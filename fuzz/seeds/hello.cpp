#include <cstdio>
#include <stdexcept>
namespace ns {
struct S { int v; __attribute__((noinline)) int get(int k) const { if (k > 1000) throw std::runtime_error("big"); return v + k; } };
inline int twice(int x) { return 2 * x; }
}
int main(int argc, char **) { ns::S s{argc}; try { std::printf("%d\n", ns::twice(s.get(argc))); } catch (...) { return 1; } return 0; }

// The demo workload: a small "key-value store" whose reads are usually fast
// and sometimes slow (a cache miss that sleeps), with an exception on bad
// keys. `make demo` starts it under `tachy latency`.
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kv {

class Store {
      public:
	// Most reads hit the cache (~100 us); one in eight misses (~2 ms).
	__attribute__((noinline)) std::string read(int key)
	{
		if (key < 0)
			throw std::invalid_argument("negative key");
		auto wait = (key % 8 == 0) ? std::chrono::microseconds(2000)
					   : std::chrono::microseconds(100);
		std::this_thread::sleep_for(wait);
		return "value-" + std::to_string(key);
	}

	__attribute__((noinline)) void write(int key, const std::string &v)
	{
		(void)key;
		std::this_thread::sleep_for(std::chrono::microseconds(300 + v.size()));
	}
};

} // namespace kv

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? std::atoi(argv[1]) : 400;
	kv::Store store;
	std::vector<std::thread> threads;
	for (int t = 0; t < 2; t++) {
		threads.emplace_back([&store, rounds, t] {
			for (int i = 0; i < rounds; i++) {
				try {
					// Every 50th key is bad: read() throws.
					int key = (i % 50 == 49) ? -1 : i + t;
					store.write(key, store.read(key));
				} catch (const std::invalid_argument &) {
				}
			}
		});
	}
	for (auto &th : threads)
		th.join();
	std::printf("demo: %d rounds on 2 threads done\n", rounds);
	return 0;
}

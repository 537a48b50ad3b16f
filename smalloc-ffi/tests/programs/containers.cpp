// Four threads build and tear down standard containers (maps of strings
// to vectors, vectors of owned strings), then print what they hold:
// compiled and run under the preload, its output the same as without it.
#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

int main() {
    std::vector<long> out(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([t, &out] {
            std::map<std::string, std::vector<int>> m;
            for (int i = 0; i < 200000; i++) {
                m[std::to_string(i % 5000 + t)].push_back(i);
                if (i % 3 == 0) m.erase(std::to_string(i % 4000));
            }
            std::vector<std::unique_ptr<std::string>> v;
            for (int i = 0; i < 100000; i++)
                v.push_back(std::make_unique<std::string>(i % 300, static_cast<char>('a' + t)));
            std::sort(v.begin(), v.end(), [](const auto &a, const auto &b) { return *a < *b; });
            long s = 0;
            for (auto &kv : m) s += static_cast<long>(kv.second.size());
            for (auto &p : v) s += static_cast<long>(p->size());
            out[t] = s + static_cast<long>(v.front()->size());
        });
    }
    for (auto &t : threads) t.join();
    for (long s : out) std::cout << s << "\n";
    return 0;
}

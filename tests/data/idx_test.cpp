#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "loom/datasets.h"
#include "loom/error.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;

// IDX bytes: header for `type` and `dims`, then `payload` as given (already big-endian).
std::string idx_bytes(unsigned char type, const std::vector<uint32_t>& dims,
                      const std::string& payload) {
  std::string s = {'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s += static_cast<char>((d >> shift) & 0xFF);
  }
  return s + payload;
}

// Big-endian bytes of each value.
template <class T>
std::string be_payload(const std::vector<T>& values) {
  std::string s;
  for (T v : values) {
    unsigned char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    for (size_t i = sizeof(T); i-- > 0;) s += static_cast<char>(b[i]);
  }
  return s;
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    return e.what();
  }
  return "<no DataError thrown>";
}

// Runs a shell command and returns its stdout.
std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

class Idx : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("loom_idx_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  // Writes `bytes` gzip-compressed with the gzip command.
  std::string write_gz(const std::string& name, const std::string& bytes) {
    std::string plain = write(name + ".tmp", bytes);
    std::string path = (dir_ / name).string();
    EXPECT_EQ(std::system(("gzip -c '" + plain + "' > '" + path + "'").c_str()), 0);
    fs::remove(plain);
    return path;
  }
  fs::path dir_;
};

TEST_F(Idx, ReadsEveryElementType) {
  {
    Tensor t =
        read_idx(write("u8", idx_bytes(0x08, {2, 3}, std::string("\x00\x01\x02\x7f\x80\xff", 6))));
    EXPECT_EQ(t.dtype(), kUInt8);
    EXPECT_EQ(t.shape_str(), "[2, 3]");
    EXPECT_EQ(to_vector<uint8_t>(t), (std::vector<uint8_t>{0, 1, 2, 127, 128, 255}));
  }
  {
    Tensor t = read_idx(write("i8", idx_bytes(0x09, {3}, std::string("\x80\xff\x05", 3))));
    EXPECT_EQ(t.dtype(), kInt8);
    const auto* p = static_cast<const int8_t*>(t.data_ptr());
    EXPECT_EQ(p[0], -128);
    EXPECT_EQ(p[1], -1);
    EXPECT_EQ(p[2], 5);
  }
  {
    std::vector<int16_t> v = {-2, 300, 32767};
    Tensor t = read_idx(write("i16", idx_bytes(0x0B, {3}, be_payload(v))));
    EXPECT_EQ(t.dtype(), kInt16);
    const auto* p = static_cast<const int16_t*>(t.data_ptr());
    EXPECT_EQ(std::vector<int16_t>(p, p + 3), v);
  }
  {
    std::vector<int32_t> v = {-70000, 1, 2, 3, 4, 2147483647};
    Tensor t = read_idx(write("i32", idx_bytes(0x0C, {1, 2, 3}, be_payload(v))));
    EXPECT_EQ(t.dtype(), kInt32);
    EXPECT_EQ(t.shape_str(), "[1, 2, 3]");
    // Read directly: loom's to_vector<int32_t> goes through float and rounds large values.
    const auto* p = static_cast<const int32_t*>(t.data_ptr());
    EXPECT_EQ(std::vector<int32_t>(p, p + 6), v);
  }
  {
    std::vector<float> v = {1.5f, -0.25f, 3e38f, 0.f};
    Tensor t = read_idx(write("f32", idx_bytes(0x0D, {2, 2}, be_payload(v))));
    EXPECT_EQ(t.dtype(), kFloat32);
    EXPECT_EQ(to_vector<float>(t), v);
  }
  {
    std::vector<double> v = {3.141592653589793, -1e-300};
    Tensor t = read_idx(write("f64", idx_bytes(0x0E, {2}, be_payload(v))));
    EXPECT_EQ(t.dtype(), kFloat64);
    EXPECT_EQ(to_vector<double>(t), v);
  }
  {
    Tensor t = read_idx(write("empty", idx_bytes(0x08, {0, 28, 28}, "")));
    EXPECT_EQ(t.shape_str(), "[0, 28, 28]");
  }
}

TEST_F(Idx, ReadsGzipByContent) {
  std::vector<int32_t> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int32_t>(i * 7919 - 3000);
  const std::string bytes = idx_bytes(0x0C, {10, 100}, be_payload(v));
  Tensor a = read_idx(write_gz("data.gz", bytes));
  EXPECT_EQ(a.shape_str(), "[10, 100]");
  EXPECT_EQ(to_vector<int32_t>(a), v);
  // The name does not matter: gzip is recognised by its magic bytes.
  Tensor b = read_idx(write_gz("data-idx2-int", bytes));
  EXPECT_EQ(to_vector<int32_t>(b), v);
}

TEST_F(Idx, BadInputNamesFileAndOffset) {
  const std::string good = idx_bytes(0x08, {4, 2}, "abcdefgh");
  std::string path = write("bad_magic", std::string("\x01\x00", 2) + good.substr(2));
  std::string msg = message_of([&] { read_idx(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad IDX magic 0x01 0x00 at byte offset 0"), std::string::npos) << msg;

  path = write("bad_type", idx_bytes(0x0A, {1}, "x"));
  msg = message_of([&] { read_idx(path); });
  EXPECT_NE(msg.find("element type 0x0A at byte offset 2"), std::string::npos) << msg;

  path = write("short_header", good.substr(0, 9));
  msg = message_of([&] { read_idx(path); });
  EXPECT_NE(msg.find("truncated IDX header"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 9"), std::string::npos) << msg;

  path = write("short_data", good.substr(0, good.size() - 3));
  msg = message_of([&] { read_idx(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(
      msg.find("truncated IDX data: 8 byte(s) expected from byte offset 12 but the data ends at "
               "byte offset 17"),
      std::string::npos)
      << msg;

  path = write("tiny", std::string("\x00\x00", 2));
  msg = message_of([&] { read_idx(path); });
  EXPECT_NE(msg.find("truncated IDX header"), std::string::npos) << msg;

  path = write("trailing", good + "zz");
  msg = message_of([&] { read_idx(path); });
  EXPECT_NE(msg.find("2 unexpected byte(s) after the IDX data, from byte offset 20"),
            std::string::npos)
      << msg;

  // Dimensions whose product overflows 64 bits must not wrap around into a small allocation.
  path = write("huge", idx_bytes(0x0E, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, "12345678"));
  msg = message_of([&] { read_idx(path); });
  EXPECT_NE(msg.find("too large to address"), std::string::npos) << msg;

  path = (dir_ / "absent").string();
  msg = message_of([&] { read_idx(path); });
  EXPECT_NE(msg.find(path + " does not exist"), std::string::npos) << msg;
}

TEST_F(Idx, TruncatedGzipIsDataError) {
  std::string payload(20000, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>((i * 131) % 251);
  std::string gz = write_gz("whole.gz", idx_bytes(0x08, {20000}, payload));
  std::string bytes;
  {
    std::ifstream in(gz, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    bytes = ss.str();
  }
  std::string path = write("cut.gz", bytes.substr(0, bytes.size() / 2));
  std::string msg = message_of([&] { read_idx(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset"), std::string::npos) << msg;
}

TEST_F(Idx, LoadsFashionMnistLayout) {
  auto make = [&](const std::string& prefix, uint32_t n, uint32_t m, bool gz) {
    std::string pixels(static_cast<size_t>(n) * 28 * 28, '\0');
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>(i % 256);
    std::string labels(m, '\0');
    for (uint32_t i = 0; i < m; ++i) labels[i] = static_cast<char>(i % 10);
    if (gz) {
      write_gz(prefix + "-images-idx3-ubyte.gz", idx_bytes(0x08, {n, 28, 28}, pixels));
      write_gz(prefix + "-labels-idx1-ubyte.gz", idx_bytes(0x08, {m}, labels));
    } else {
      write(prefix + "-images-idx3-ubyte", idx_bytes(0x08, {n, 28, 28}, pixels));
      write(prefix + "-labels-idx1-ubyte", idx_bytes(0x08, {m}, labels));
    }
  };
  make("train", 12, 12, true);
  make("t10k", 3, 3, false);
  MnistSplit train = load_fashion_mnist(dir_.string(), true);
  EXPECT_EQ(train.images.dtype(), kUInt8);
  EXPECT_EQ(train.images.shape_str(), "[12, 28, 28]");
  EXPECT_EQ(train.labels.dtype(), kInt64);
  EXPECT_EQ(to_vector<int64_t>(train.labels),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1}));
  EXPECT_EQ(to_vector<uint8_t>(train.images)[785], 785 % 256);
  MnistSplit test = load_fashion_mnist(dir_.string(), false);
  EXPECT_EQ(test.images.shape_str(), "[3, 28, 28]");

  // Count mismatch between images and labels.
  make("t10k", 3, 2, false);
  std::string msg = message_of([&] { load_fashion_mnist(dir_.string(), false); });
  EXPECT_NE(msg.find("t10k-images-idx3-ubyte holds 3 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("t10k-labels-idx1-ubyte holds 2 labels"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 4"), std::string::npos) << msg;

  // A label outside 0..9.
  write("t10k-labels-idx1-ubyte", idx_bytes(0x08, {3}, std::string("\x01\x0c\x02", 3)));
  msg = message_of([&] { load_fashion_mnist(dir_.string(), false); });
  EXPECT_NE(msg.find("label 12 out of range 0..9 at byte offset 9"), std::string::npos) << msg;

  // Images of the wrong shape.
  write("t10k-images-idx3-ubyte", idx_bytes(0x08, {3, 4}, std::string(12, '\0')));
  msg = message_of([&] { load_fashion_mnist(dir_.string(), false); });
  EXPECT_NE(msg.find("expected uint8 images [N, 28, 28]"), std::string::npos) << msg;
}

TEST_F(Idx, MissingDatasetSaysHowToInstall) {
  const std::string missing = (dir_ / "nowhere").string();
  std::string msg = message_of([&] { load_fashion_mnist(missing, true); });
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_NE(msg.find("sudo apt install dataset-fashion-mnist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("LOOM_FASHION_MNIST_DIR"), std::string::npos) << msg;

  // The directory exists but a file is missing.
  msg = message_of([&] { load_fashion_mnist(dir_.string(), true); });
  EXPECT_NE(msg.find((dir_ / "train-images-idx3-ubyte.gz").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("sudo apt install dataset-fashion-mnist"), std::string::npos) << msg;
}

TEST(FashionMnistDir, EnvironmentOverridesDebianPath) {
  const char* old = std::getenv("LOOM_FASHION_MNIST_DIR");
  const std::string saved = old ? old : "";
  setenv("LOOM_FASHION_MNIST_DIR", "/tmp/my-fmnist", 1);
  EXPECT_EQ(default_fashion_mnist_dir(), "/tmp/my-fmnist");
  unsetenv("LOOM_FASHION_MNIST_DIR");
  EXPECT_EQ(default_fashion_mnist_dir(), "/usr/share/datasets/fashion-mnist");
  if (old) setenv("LOOM_FASHION_MNIST_DIR", saved.c_str(), 1);
}

// The real dataset from Debian's dataset-fashion-mnist, when installed.
constexpr const char* kDebianDir = "/usr/share/datasets/fashion-mnist";

TEST(FashionMnistDebian, TrainAndTestSplits) {
  if (!fs::exists(fs::path(kDebianDir) / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  MnistSplit train = load_fashion_mnist(kDebianDir, true);
  MnistSplit test = load_fashion_mnist(kDebianDir, false);
  EXPECT_EQ(train.images.shape_str(), "[60000, 28, 28]");
  EXPECT_EQ(train.labels.shape_str(), "[60000]");
  EXPECT_EQ(test.images.shape_str(), "[10000, 28, 28]");
  EXPECT_EQ(test.labels.shape_str(), "[10000]");
  std::vector<int64_t> hist(10, 0);
  for (int64_t l : to_vector<int64_t>(train.labels)) {
    ASSERT_GE(l, 0);
    ASSERT_LE(l, 9);
    hist[static_cast<size_t>(l)]++;
  }
  EXPECT_EQ(hist, std::vector<int64_t>(10, 6000));
  std::vector<int64_t> test_hist(10, 0);
  for (int64_t l : to_vector<int64_t>(test.labels)) test_hist[static_cast<size_t>(l)]++;
  EXPECT_EQ(test_hist, std::vector<int64_t>(10, 1000));

  // An independent reading with Python's standard library: first image's pixels and first labels.
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 to cross-check";
  const std::string script =
      "import gzip, struct\n"
      "d = '" +
      std::string(kDebianDir) +
      "/'\n"
      "with gzip.open(d + 'train-images-idx3-ubyte.gz', 'rb') as f:\n"
      "    magic, n, r, c = struct.unpack('>IIII', f.read(16))\n"
      "    px = f.read(r * c)\n"
      "with gzip.open(d + 'train-labels-idx1-ubyte.gz', 'rb') as f:\n"
      "    lmagic, ln = struct.unpack('>II', f.read(8))\n"
      "    lb = f.read(20)\n"
      "print(magic, n, r, c, lmagic, ln)\n"
      "print(' '.join(map(str, px)))\n"
      "print(' '.join(map(str, lb)))\n";
  const std::string script_path =
      (fs::temp_directory_path() / ("loom_idx_check_" + std::to_string(getpid()) + ".py")).string();
  std::ofstream(script_path) << script;
  std::istringstream py(run_capture("/usr/bin/python3 '" + script_path + "'"));
  fs::remove(script_path);
  long magic = 0, n = 0, rows = 0, cols = 0, lmagic = 0, ln = 0;
  ASSERT_TRUE(py >> magic >> n >> rows >> cols >> lmagic >> ln) << "python3 gave no output";
  EXPECT_EQ(magic, 0x0803);
  EXPECT_EQ(lmagic, 0x0801);
  EXPECT_EQ(n, 60000);
  EXPECT_EQ(ln, 60000);
  ASSERT_EQ(rows * cols, 784);
  std::vector<uint8_t> ours = to_vector<uint8_t>(train.images[0]);
  std::vector<uint8_t> theirs(784);
  for (auto& v : theirs) {
    int x;
    ASSERT_TRUE(py >> x);
    v = static_cast<uint8_t>(x);
  }
  EXPECT_EQ(ours, theirs);
  std::vector<int64_t> first_labels = to_vector<int64_t>(train.labels.narrow(0, 0, 20));
  for (int64_t l : first_labels) {
    int x;
    ASSERT_TRUE(py >> x);
    EXPECT_EQ(l, x);
  }
}

}  // namespace
}  // namespace loom::data

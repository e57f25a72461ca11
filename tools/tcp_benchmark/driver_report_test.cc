#include "tools/tcp_benchmark/driver_report.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace netstack::tools::bench {
namespace {

Measurement Make(const char* mode, int mtu, bool client, double gbps,
                 uint64_t bytes, double cpu) {
  Measurement m;
  m.spec.mode = mode;
  m.spec.mtu = mtu;
  m.spec.netstack_is_client = client;
  m.spec.duration = 2;
  m.client.gbps = gbps;
  m.client.bytes = bytes;
  m.client.retransmits = 7;
  m.netstack_cpu_seconds = cpu;
  return m;
}

TEST(DriverReportTest, RatiosAreAgainstTheBaselineOfTheSameMtu) {
  std::vector<Measurement> all = {
      Make(kModeKernel, 1500, true, 20, 5'000'000'000, 1),
      Make(kModeSw, 1500, true, 5, 2'000'000'000, 3),
      Make(kModeKernel, 9000, true, 40, 10'000'000'000, 1),
      Make(kModeOff, 9000, false, 10, 1'000'000'000, 2),
  };
  EXPECT_EQ(KernelGbps(all, 1500), 20);
  EXPECT_EQ(KernelGbps(all, 9000), 40);
  EXPECT_EQ(KernelGbps(all, 4000), std::nullopt);
  const std::string json = FormatJson(all);
  EXPECT_NE(json.find(R"("mode":"kernel","mtu":1500,"netstack_role":"sender",)"
                      R"("gbps":20,"cpu_s_per_gb":0.2,"retransmits":7,)"
                      R"("ratio_to_kernel":1,)"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("mode":"sw","mtu":1500,"netstack_role":"sender",)"
                      R"("gbps":5,"cpu_s_per_gb":1.5,"retransmits":7,)"
                      R"("ratio_to_kernel":0.25,)"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("mode":"off","mtu":9000,"netstack_role":"receiver",)"
                      R"("gbps":10,"cpu_s_per_gb":2,"retransmits":7,)"
                      R"("ratio_to_kernel":0.25,)"),
            std::string::npos)
      << json;
  EXPECT_EQ(json.front(), '[');
  EXPECT_EQ(json[json.size() - 2], ']');
}

TEST(DriverReportTest, FailedRowsCarryTheErrorAndNoRatio) {
  Measurement failed = Make(kModeHost, 1500, true, 0, 0, 0);
  failed.error = "server exited with 1\n\"why\"";
  std::vector<Measurement> all = {failed};
  const std::string json = FormatJson(all);
  EXPECT_NE(json.find(R"("ratio_to_kernel":null)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("error":"server exited with 1\n\"why\"")"),
            std::string::npos)
      << json;
  EXPECT_NE(FormatTable(all).find("FAILED"), std::string::npos);
}

TEST(DriverReportTest, ReverseMakesTheClientTheReceiver) {
  Measurement m = Make(kModeSw, 1500, true, 1, 1, 0);
  m.spec.reverse = true;
  EXPECT_NE(FormatJson({m}).find(R"("netstack_role":"receiver")"),
            std::string::npos);
  EXPECT_NE(FormatTable({m}).find("receiver"), std::string::npos);
}

TEST(DriverReportTest, TableHasOneLinePerMeasurementAndTheRatio) {
  std::vector<Measurement> all = {
      Make(kModeKernel, 1500, true, 20, 5'000'000'000, 1),
      Make(kModeSw, 1500, false, 5, 2'000'000'000, 3)};
  const std::string table = FormatTable(all);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3) << table;
  EXPECT_NE(table.find("0.25"), std::string::npos) << table;
  EXPECT_NE(table.find("20.00"), std::string::npos) << table;
}

}  // namespace
}  // namespace netstack::tools::bench

#include <gtest/gtest.h>

#include "control/messages.h"

namespace millipede::control {
namespace {

TEST(ControlMessagesTest, JobDescriptorRoundTrips) {
  JobDescriptor d;
  d.job_id = 42;
  d.prompt_ids = {1, 2, 3, 500};
  d.max_new_tokens = 17;
  d.temperature = 0.7f;
  d.top_k = 5;
  d.top_p = 0.9f;
  d.seed = 1ull << 40;
  d.stop_ids = {7};
  d.ignore_eos = true;
  JobDescriptor back;
  ASSERT_TRUE(Decode(Encode(d), &back).ok());
  EXPECT_EQ(back.job_id, 42u);
  EXPECT_EQ(back.prompt_ids, d.prompt_ids);
  EXPECT_EQ(back.max_new_tokens, 17);
  EXPECT_EQ(back.temperature, 0.7f);
  EXPECT_EQ(back.top_k, 5);
  EXPECT_EQ(back.top_p, 0.9f);
  EXPECT_EQ(back.seed, 1ull << 40);
  EXPECT_EQ(back.stop_ids, d.stop_ids);
  EXPECT_TRUE(back.ignore_eos);
}

TEST(ControlMessagesTest, EventsHelloAndStatsRoundTrip) {
  JobEvent e;
  e.kind = JobEventKind::kFailed;
  e.job_id = 9;
  e.status_code = 7;
  e.message = "out of memory";
  JobEvent eb;
  ASSERT_TRUE(Decode(Encode(e), &eb).ok());
  EXPECT_EQ(eb.kind, JobEventKind::kFailed);
  EXPECT_EQ(eb.message, "out of memory");
  EXPECT_EQ(eb.status_code, 7);

  WorkerHello h;
  h.rank = 2;
  h.vocab_size = 128256;
  h.max_context = 1 << 20;
  h.kv_capacity_tokens = 123;
  h.eos_ids = {128001, 128009};
  h.backend = "cuda";
  WorkerHello hb;
  ASSERT_TRUE(Decode(Encode(h), &hb).ok());
  EXPECT_EQ(hb.eos_ids, h.eos_ids);
  EXPECT_EQ(hb.backend, "cuda");
  EXPECT_EQ(hb.kv_capacity_tokens, 123);

  WorkerStats s;
  s.rank = 1;
  s.kv_bytes_host = 4096;
  s.comm_s = 1.5;
  WorkerStats sb;
  ASSERT_TRUE(Decode(Encode(s), &sb).ok());
  EXPECT_EQ(sb.kv_bytes_host, 4096);
  EXPECT_EQ(sb.comm_s, 1.5);
}

TEST(ControlMessagesTest, TruncatedOrPaddedMessagesAreRefused) {
  JobDescriptor d;
  d.prompt_ids = {1, 2, 3};
  std::vector<char> bytes = Encode(d);
  JobDescriptor back;
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<char> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    EXPECT_FALSE(Decode(cut, &back).ok()) << n;
  }
  bytes.push_back(0);
  EXPECT_FALSE(Decode(bytes, &back).ok());
  // A length field larger than the message must not allocate or read past the end.
  std::vector<char> huge(16, '\xff');
  EXPECT_FALSE(Decode(huge, &back).ok());
}

}  // namespace
}  // namespace millipede::control

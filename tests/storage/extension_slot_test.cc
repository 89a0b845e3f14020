// tests/storage/extension_slot_test.cc — ExtensionSlot (storage/extension_slot.h): empty until a
// layer above builds its object, built once in place, destroyed exactly once with its holder.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "oclvm/storage/extension_slot.h"
#include "oclvm/storage/storage_objects.h"

namespace oclvm {
namespace {

// Counts its destructions; holds a vector so that it is not trivially destructible.
struct Counted {
  explicit Counted(int* destroyed) : destroyed(destroyed) {}
  ~Counted() { ++*destroyed; }
  int* destroyed;
  std::vector<int> values;
};

TEST(ExtensionSlotTest, BuildsOnceAndDestroysOnceWithItsHolder) {
  int destroyed = 0;
  {
    ExtensionSlot slot;
    EXPECT_EQ(slot.find<Counted>(), nullptr);
    Counted& first = slot.get_or_emplace<Counted>(&destroyed);
    first.values.assign(100, 7);  // owns heap memory: its destructor must run (LeakSanitizer)
    Counted& again = slot.get_or_emplace<Counted>(&destroyed);
    EXPECT_EQ(&again, &first) << "the second call finds the object, builds none";
    EXPECT_EQ(slot.find<Counted>(), &first);
    const ExtensionSlot& view = slot;
    EXPECT_EQ(view.find<Counted>(), &first);
    EXPECT_EQ(destroyed, 0);
  }
  EXPECT_EQ(destroyed, 1);
}

TEST(ExtensionSlotTest, AnEmptySlotDestroysNothing) {
  int destroyed = 0;
  { ExtensionSlot slot; }
  EXPECT_EQ(destroyed, 0);
}

TEST(ExtensionSlotTest, ABlobDestroysWhatALayerAboveKeptInIt) {
  int destroyed = 0;
  auto blob = std::make_shared<BlobObject>(Device{DeviceType::kCpu, 0}, size_t{64});
  EXPECT_EQ(blob->extension().find<Counted>(), nullptr);
  blob->extension().get_or_emplace<Counted>(&destroyed);
  blob.reset();
  EXPECT_EQ(destroyed, 1);
}

}  // namespace
}  // namespace oclvm

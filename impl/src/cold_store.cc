// The spill tier's LMDB environment. See cowstate/cold_store.h.
#include "cowstate/cold_store.h"

#include <lmdb.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cowstate/assert.h"

namespace cowstate {

namespace {

MDB_val val(std::span<const std::byte> b) noexcept {
  return MDB_val{b.size(), const_cast<std::byte*>(b.data())};
}
std::span<const std::byte> span(const MDB_val& v) noexcept {
  return {static_cast<const std::byte*>(v.mv_data), v.mv_size};
}
[[noreturn]] void fail(const char* call, int rc) {
  throw ColdStoreError(std::string("cold tier: ") + call + ": " + mdb_strerror(rc));
}
bool has_prefix(const MDB_val& k, const ColdPrefix& p) noexcept {
  return k.mv_size >= kColdPrefixSize && std::memcmp(k.mv_data, p.data(), kColdPrefixSize) == 0;
}
std::uint64_t load_be64(const unsigned char* p) noexcept {
  std::uint64_t x;
  std::memcpy(&x, p, 8);
  return __builtin_bswap64(x);
}
// The order of memcmp over the shorter length, then the shorter first (LMDB's default), in
// 8-byte big-endian words: a record key is 14 bytes or more (prefix, then a key), and the
// default's call into memcmp per comparison was a tenth of a cold access.
int compare_keys(const MDB_val* a, const MDB_val* b) {
  const auto* pa = static_cast<const unsigned char*>(a->mv_data);
  const auto* pb = static_cast<const unsigned char*>(b->mv_data);
  const std::size_t n = std::min(a->mv_size, b->mv_size);
  if (n >= 8) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const std::uint64_t x = load_be64(pa + i);
      const std::uint64_t y = load_be64(pb + i);
      if (x != y) return x < y ? -1 : 1;
    }
    if (i < n) {  // the last 8 bytes again: the bytes before i are equal
      const std::uint64_t x = load_be64(pa + n - 8);
      const std::uint64_t y = load_be64(pb + n - 8);
      if (x != y) return x < y ? -1 : 1;
    }
  } else if (const int c = n == 0 ? 0 : std::memcmp(pa, pb, n); c != 0) {
    return c;
  }
  return a->mv_size < b->mv_size ? -1 : a->mv_size > b->mv_size ? 1 : 0;
}
// Removes the store's directory and the two files LMDB made in it.
void remove_directory(const std::string& dir) {
  if (dir.empty()) return;
  (void)::unlink((dir + "/data.mdb").c_str());
  (void)::unlink((dir + "/lock.mdb").c_str());
  (void)::rmdir(dir.c_str());
}

}  // namespace

ColdPrefix cold_prefix(std::uint32_t table_id, std::int32_t key_group) noexcept {
  COWSTATE_ASSERT(key_group >= 0 && key_group < 65536, "P2", "a key group beyond 16 bits");
  const auto g = static_cast<std::uint16_t>(key_group);
  return ColdPrefix{std::byte(table_id >> 24), std::byte(table_id >> 16), std::byte(table_id >> 8),
                    std::byte(table_id),       std::byte(g >> 8),         std::byte(g)};
}

ColdReadTxn::~ColdReadTxn() { mdb_txn_abort(txn_); }

ColdCursor::ColdCursor(std::shared_ptr<ColdReadTxn> txn, const ColdPrefix& prefix)
    : txn_(std::move(txn)), prefix_(prefix) {
  COWSTATE_ASSERT(txn_ != nullptr, "P1", "a cursor without a read transaction");
  if (const int rc = mdb_cursor_open(txn_->txn(), txn_->dbi(), &cursor_); rc != 0) {
    fail("mdb_cursor_open", rc);
  }
}

ColdCursor::~ColdCursor() {
  if (cursor_ != nullptr) mdb_cursor_close(cursor_);
}

bool ColdCursor::next(std::span<const std::byte>& key, std::span<const std::byte>& value) {
  if (done_) return false;
  MDB_val k = val(prefix_);
  MDB_val v{};
  const int rc = mdb_cursor_get(cursor_, &k, &v, started_ ? MDB_NEXT : MDB_SET_RANGE);
  started_ = true;
  if (rc == MDB_NOTFOUND || (rc == 0 && !has_prefix(k, prefix_))) {
    done_ = true;
    return false;
  }
  if (rc != 0) fail("mdb_cursor_get", rc);
  key = span(k).subspan(kColdPrefixSize);
  value = span(v);
  return true;
}

Result<std::unique_ptr<ColdStore>> ColdStore::open(const ColdStoreOptions& options) {
  std::string parent = options.parent_directory;
  if (parent.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  std::string templ = parent + "/cowstate-cold-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    return Status::error("cold tier: cannot make a directory under " + parent + ": " +
                         std::strerror(errno));
  }
  const std::string directory = buf.data();
  bool named = true;  // the directory and its files still have their names
  std::unique_ptr<ColdStore> s(new ColdStore());
  s->commit_every_ = options.commit_every_writes == 0 ? 1 : options.commit_every_writes;
  auto error = [&](const char* call, int rc) {
    if (named) remove_directory(directory);
    return Status::error("cold tier in " + directory + ": " + call + ": " + mdb_strerror(rc));
  };
  if (int rc = mdb_env_create(&s->env_); rc != 0) return error("mdb_env_create", rc);
  if (int rc = mdb_env_set_mapsize(s->env_, options.map_size_bytes); rc != 0) {
    return error("mdb_env_set_mapsize", rc);
  }
  if (int rc = mdb_env_set_maxreaders(s->env_, options.max_readers); rc != 0) {
    return error("mdb_env_set_maxreaders", rc);
  }
  const unsigned flags = MDB_NOTLS | MDB_NOSYNC | MDB_NOMETASYNC | MDB_WRITEMAP | MDB_NORDAHEAD;
  if (int rc = mdb_env_open(s->env_, directory.c_str(), flags, 0600); rc != 0) {
    return error("mdb_env_open", rc);
  }
  // LMDB works through the descriptors and maps it holds from here on, so the names can go
  // now: a process that dies without closing the store leaves nothing behind, and the disk
  // space returns when the descriptors close.
  remove_directory(directory);
  named = false;
  MDB_txn* txn = nullptr;
  if (int rc = mdb_txn_begin(s->env_, nullptr, 0, &txn); rc != 0) {
    return error("mdb_txn_begin", rc);
  }
  if (int rc = mdb_dbi_open(txn, nullptr, 0, &s->dbi_); rc != 0) {
    mdb_txn_abort(txn);
    return error("mdb_dbi_open", rc);
  }
  if (int rc = mdb_set_compare(txn, s->dbi_, compare_keys); rc != 0) {
    mdb_txn_abort(txn);
    return error("mdb_set_compare", rc);
  }
  if (int rc = mdb_txn_commit(txn); rc != 0) return error("mdb_txn_commit", rc);
  return s;
}

ColdStore::~ColdStore() {
  if (cursor_ != nullptr) mdb_cursor_close(cursor_);
  if (txn_ != nullptr) mdb_txn_abort(txn_);
  if (env_ != nullptr) mdb_env_close(env_);
}

MDB_txn* ColdStore::write_txn() {
  if (txn_ == nullptr) {
    if (const int rc = mdb_txn_begin(env_, nullptr, 0, &txn_); rc != 0) {
      txn_ = nullptr;
      fail("mdb_txn_begin", rc);
    }
    writes_in_txn_ = 0;
  }
  return txn_;
}

MDB_cursor* ColdStore::cursor() {
  MDB_txn* t = write_txn();
  if (cursor_ == nullptr) {
    if (const int rc = mdb_cursor_open(t, dbi_, &cursor_); rc != 0) {
      cursor_ = nullptr;
      fail("mdb_cursor_open", rc);
    }
  }
  return cursor_;
}

void ColdStore::wrote() {
  if (++writes_in_txn_ >= commit_every_) commit();
}

void ColdStore::commit() {
  if (txn_ == nullptr) return;
  if (cursor_ != nullptr) mdb_cursor_close(cursor_);
  cursor_ = nullptr;
  MDB_txn* t = txn_;
  txn_ = nullptr;
  if (const int rc = mdb_txn_commit(t); rc != 0) fail("mdb_txn_commit", rc);
  ++commits_;
}

bool ColdStore::get(std::span<const std::byte> key, std::span<const std::byte>& value) {
  MDB_val k = val(key);
  MDB_val v{};
  const int rc = mdb_cursor_get(cursor(), &k, &v, MDB_SET_KEY);
  if (rc == MDB_NOTFOUND) return false;
  if (rc != 0) fail("mdb_cursor_get", rc);
  value = span(v);
  return true;
}

bool ColdStore::put(std::span<const std::byte> key, std::span<const std::byte> value) {
  MDB_val k = val(key);
  MDB_val v = val(value);
  MDB_cursor* c = cursor();
  // MDB_NOOVERWRITE tells whether the key was present in the same search and leaves the
  // cursor on it; only then is the value replaced where it stands.
  int rc = mdb_cursor_put(c, &k, &v, MDB_NOOVERWRITE);
  const bool existed = rc == MDB_KEYEXIST;
  if (existed) {
    v = val(value);
    rc = mdb_cursor_put(c, &k, &v, MDB_CURRENT);
  }
  if (rc != 0) fail("mdb_cursor_put", rc);
  wrote();
  return existed;
}

void ColdStore::overwrite(std::span<const std::byte> key, std::span<const std::byte> value) {
  MDB_val k = val(key);
  MDB_val v = val(value);
  if (const int rc = mdb_cursor_put(cursor(), &k, &v, 0); rc != 0) fail("mdb_cursor_put", rc);
  wrote();
}

bool ColdStore::insert(std::span<const std::byte> key, std::span<const std::byte> value) {
  MDB_val k = val(key);
  MDB_val v = val(value);
  const int rc = mdb_cursor_put(cursor(), &k, &v, MDB_NOOVERWRITE);
  if (rc == MDB_KEYEXIST) return false;
  if (rc != 0) fail("mdb_cursor_put", rc);
  wrote();
  return true;
}

std::size_t ColdStore::insert_sorted(std::span<const Record> records) {
  unsigned flags = MDB_APPEND;
  for (std::size_t i = 0; i < records.size(); ++i) {
    MDB_cursor* c = cursor();  // wrote() may have committed, closing the last one
    MDB_val k = val(records[i].key);
    MDB_val v = val(records[i].value);
    int rc = mdb_cursor_put(c, &k, &v, flags | MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST && flags == MDB_APPEND) {  // not after the store's last key
      flags = 0;
      v = val(records[i].value);
      rc = mdb_cursor_put(c, &k, &v, MDB_NOOVERWRITE);
    }
    if (rc == MDB_KEYEXIST) return i;
    if (rc != 0) fail("mdb_cursor_put", rc);
    wrote();
  }
  return records.size();
}

bool ColdStore::erase(std::span<const std::byte> key) {
  MDB_val k = val(key);
  MDB_val v{};
  MDB_cursor* c = cursor();
  int rc = mdb_cursor_get(c, &k, &v, MDB_SET);
  if (rc == MDB_NOTFOUND) return false;
  if (rc == 0) rc = mdb_cursor_del(c, 0);
  if (rc != 0) fail("mdb_cursor_del", rc);
  wrote();
  return true;
}

std::size_t ColdStore::erase_range(const ColdPrefix& prefix) {
  MDB_cursor* c = nullptr;
  if (const int rc = mdb_cursor_open(write_txn(), dbi_, &c); rc != 0) fail("mdb_cursor_open", rc);
  std::size_t n = 0;
  MDB_val k = val(prefix);
  MDB_val v{};
  int rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
  while (rc == 0 && has_prefix(k, prefix)) {
    if (const int d = mdb_cursor_del(c, 0); d != 0) {
      mdb_cursor_close(c);
      fail("mdb_cursor_del", d);
    }
    ++n;
    // After a delete the cursor stands on the next record: GET_CURRENT reads it.
    rc = mdb_cursor_get(c, &k, &v, MDB_GET_CURRENT);
  }
  mdb_cursor_close(c);
  if (rc != 0 && rc != MDB_NOTFOUND && rc != EINVAL) fail("mdb_cursor_get", rc);
  writes_in_txn_ += n;
  wrote();
  return n;
}

ColdStore::ScanState ColdStore::scan_begin(const ColdPrefix& prefix) {
  ScanState s{nullptr, prefix, false};
  if (const int rc = mdb_cursor_open(write_txn(), dbi_, &s.cursor); rc != 0) {
    fail("mdb_cursor_open", rc);
  }
  return s;
}

bool ColdStore::scan_next(ScanState& s, std::span<const std::byte>& key,
                          std::span<const std::byte>& value) {
  MDB_val k = val(s.prefix);
  MDB_val v{};
  const int rc = mdb_cursor_get(s.cursor, &k, &v, s.started ? MDB_NEXT : MDB_SET_RANGE);
  s.started = true;
  if (rc == MDB_NOTFOUND || (rc == 0 && !has_prefix(k, s.prefix))) return false;
  if (rc != 0) {
    scan_end(s);
    fail("mdb_cursor_get", rc);
  }
  key = span(k).subspan(kColdPrefixSize);
  value = span(v);
  return true;
}

void ColdStore::scan_end(ScanState& s) noexcept {
  if (s.cursor != nullptr) mdb_cursor_close(s.cursor);
  s.cursor = nullptr;
}

std::shared_ptr<ColdReadTxn> ColdStore::read_txn() {
  commit();  // P1: the read transaction sees every write so far
  MDB_txn* t = nullptr;
  if (const int rc = mdb_txn_begin(env_, nullptr, MDB_RDONLY, &t); rc != 0) {
    fail("mdb_txn_begin (read)", rc);
  }
  return std::make_shared<ColdReadTxn>(t, dbi_);
}

}  // namespace cowstate

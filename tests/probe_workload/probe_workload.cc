// The probe workload; see probe_workload.h.
#include "probe_workload.h"

#include <memory>
#include <string>
#include <vector>

#include "core/option_items.h"
#include "core/sim_core.h"
#include "cowstate/cow_state_map.h"
#include "cowstate/model/versioned_map.h"
#include "cowstate/sim/random.h"

namespace cowstate::sim::probe {

namespace {

template <class F>
void for_each_field(ProbeOptions& o, F&& f) {
  f("ops_max", o.ops_max);
  f("reads", o.reads);
  f("keys", o.keys);
  f("put_percent", o.put_percent);
  f("remove_percent", o.remove_percent);
  f("initial_capacity", o.initial_capacity);
  f("deep_check_every", o.deep_check_every);
}

constexpr auto kFields = [](auto& o, auto&& f) { for_each_field(o, f); };
}  // namespace

ProbeOptions ProbeOptions::swarm(std::uint64_t seed, std::uint32_t ops_max,
                                 std::uint32_t deep_check_every) {
  Prng rng(derive_seed(seed, 0x9b0));
  ProbeOptions o;
  o.ops_max = ops_max;
  o.deep_check_every = deep_check_every;
  o.reads = static_cast<std::uint32_t>(rng.between(1, 8));
  o.keys = static_cast<std::uint32_t>(rng.between(1, 16));
  o.put_percent = static_cast<std::uint32_t>(rng.between(10, 90));
  o.remove_percent = static_cast<std::uint32_t>(rng.below(101 - o.put_percent));
  o.initial_capacity = 1u << rng.below(5);
  return o;
}

std::string ProbeOptions::to_string() const { return detail::field_items(*this, kFields); }

std::optional<ProbeOptions> ProbeOptions::parse(std::string_view line, std::string* error) {
  ProbeOptions o;
  const bool parsed = detail::parse_items(
      line, error, [&o](std::string_view key, std::string_view value, bool* ok) {
        return detail::assign_field(o, kFields, key, value, ok);
      });
  if (!parsed) return std::nullopt;
  if (o.ops_max == 0 || o.keys == 0 || o.put_percent + o.remove_percent > 100 ||
      o.initial_capacity == 0 || o.initial_capacity > (1u << 20)) {
    *error =
        "options out of range (ops_max, keys >= 1; put_percent + remove_percent <= 100; "
        "initial_capacity in [1, 2^20])";
    return std::nullopt;
  }
  return o;
}

namespace {

using detail::expect;
using detail::TaskKind;
using Key = std::uint64_t;
using Ns = std::int32_t;
using State = std::vector<std::int64_t>;
using Map = CowStateMap<Key, Ns, State>;
using Model = model::VersionedMap<Key, Ns, State>;

std::string text(const State* s) { return s != nullptr ? model::to_text(*s) : "absent"; }
std::string text(const std::optional<State>& s) { return s ? model::to_text(*s) : "absent"; }

class ProbeSimulation final : public detail::SimCore {
 public:
  ProbeSimulation(const RunConfig& config, Strategy& strategy, bool skip_remove)
      : SimCore(config, strategy),
        opts_(options_for(config)),
        skip_remove_(skip_remove),
        map_(std::make_unique<Map>(map_options(config, opts_))) {
    step_bound_ = config.step_bound != 0 ? config.step_bound
                                         : std::uint64_t{opts_.ops_max + opts_.reads} * 100 + 1000;
  }
  // A run stopped between steps may have left the writer inside an operation: it finishes
  // that operation first. A map a production assertion broke is parked, not destroyed.
  ~ProbeSimulation() override {
    if (!broken_) finish_writer_op();
    tasks_.clear();
    static std::vector<std::unique_ptr<Map>> parked;
    if (broken_ || writer_in_op_) parked.push_back(std::move(map_));
  }

 private:
  // A scenario's options: a writer operation per writer line, as many reads in a free
  // schedule.
  static ProbeOptions options_for(const RunConfig& config) {
    if (config.scenario == nullptr) return options_of<ProbeOptions>(*config.options);
    ProbeOptions o;
    o.ops_max = 0;
    for (const ScenarioItem& item : config.scenario->items) {
      const StepLine* s = step_of(item);
      if (s != nullptr && s->task == "writer" && s->action.kind != ActionKind::resume) ++o.ops_max;
    }
    o.reads = config.scenario->config.fixed_schedule ? 0 : o.ops_max;
    return o;
  }
  // A scenario's capacities, or a generated run's initial one.
  static MapOptions map_options(const RunConfig& config, const ProbeOptions& o) {
    if (config.scenario == nullptr) return {o.initial_capacity, 1, 1u << 30};
    const ScenarioConfig& c = config.scenario->config;
    return {c.initial_capacity, c.min_capacity, c.max_capacity};
  }

  void start() override {
    trace(scenario_ != nullptr
              ? "scenario " + scenario_->file
              : "seed " + std::to_string(config_.seed) + " options " + opts_.to_string());
    strategy_.begin_run(config_.seed);
    spawn("writer", "writer", TaskKind::writer, 4, [this] {
      writer_loop(
          opts_.ops_max, [this](Prng& rng) { return generate(rng); },
          [this](const Action& a) { execute(a); }, [] {});
    });
    if (opts_.reads > 0) spawn("reader", "reader", TaskKind::serializer, 1, [this] { read(); });
  }

  Action generate(Prng& rng) const {
    Action a;
    const std::uint64_t r = rng.below(100);
    a.map_op = r < opts_.put_percent                          ? OpKind::put
               : r < opts_.put_percent + opts_.remove_percent ? OpKind::remove
                                                              : OpKind::get;
    a.entry.first = rng.below(opts_.keys);
    if (a.is(OpKind::put)) a.value = {static_cast<std::int64_t>(rng.below(100))};
    return a;
  }

  void execute(const Action& a) {
    const Key k = a.entry.first;
    const Ns n = a.entry.second;
    const std::string what = std::string(action_name(a)) + " " + model::to_text(a.entry);
    trace("writer " + what + (a.value.empty() ? "" : " " + model::to_text(State(a.value))));
    auto same = [&what](const std::string& got, const std::string& want) {
      expect(got == want, "result", what + " returned " + got + ", model " + want);
    };
    switch (a.kind == ActionKind::map_op ? a.map_op : OpKind::snapshot_release) {
      case OpKind::put:
        model_.put(k, n, a.value);
        return map_->put(k, n, a.value);
      case OpKind::put_and_get_old:
        return same(text(map_->put_and_get_old(k, n, a.value)),
                    text(model_.put_and_get_old(k, n, a.value)));
      case OpKind::remove: {
        const bool want = model_.remove(k, n);
        return same(std::to_string(skip_remove_ ? want : map_->remove(k, n)), std::to_string(want));
      }
      case OpKind::remove_and_get_old:
        return same(text(map_->remove_and_get_old(k, n)), text(model_.remove_and_get_old(k, n)));
      case OpKind::get:
        return same(text(map_->get(k, n)), text(model_.get(k, n)));
      case OpKind::contains:
        return same(std::to_string(map_->contains(k, n)), std::to_string(model_.contains(k, n)));
      default:
        invalid(*tasks_[0], std::string("the probe workload has no ") + action_name(a) +
                                " (one map, no snapshots)");
    }
  }

  // The reader: `reads` gets of random keys, each a step of its own. Yields are off during
  // its get, so the writer never runs inside it.
  void read() {
    detail::Task& self = *tasks_[1];
    for (std::uint32_t i = 0; i < opts_.reads; ++i) {
      const Key k = self.rng.below(opts_.keys);
      trace("reader get (" + std::to_string(k) + ",0)");
      yields_enabled_ = false;
      const std::string got = text(map_->get(k, 0));
      yields_enabled_ = true;
      const std::string want = text(model_.get(k, 0));
      expect(got == want, "read",
             "reader get (" + std::to_string(k) + ",0) returned " + got + ", model " + want);
      end_unit(self);
      Fiber::yield();
    }
  }

  bool is_runnable(const detail::Task& t) const override {
    return !t.fiber->finished() && (t.kind == TaskKind::writer || !writer_in_op_);
  }

  Model::Image live() const {
    Model::Image out;
    map_->for_each([&out](const Key& k, const Ns& n, const State& s) {
      out.emplace(std::pair{k, n}, s);
    });
    return out;
  }

  void after_step_checks() override {
    if (writer_in_op_) return;
    const Model::Image want = model_.live();
    if (const auto d = model::diff(want, live()))
      expect(false, "live", "live map differs from the model: " + *d);
    if (opts_.deep_check_every != 0 && result_.stats.steps % opts_.deep_check_every == 0) {
      ++result_.stats.deep_checks;
      std::string why;
      expect(map_->check_invariants(&why), why.substr(0, why.find(':')), why);
    }
  }
  void after_resume(detail::Task&, const StepRecord&) override { after_step_checks(); }

  void check_expectation(const Expectation& e) override {
    if (e.kind == ExpectKind::failure) return;  // judged on the whole run
    if (e.kind != ExpectKind::image || e.target != "live") {
      throw detail::ScenarioInvalid{e.line, "the probe workload checks `expect live` only"};
    }
    const Model::Image want(e.image.begin(), e.image.end());
    const Model::Image got = live();
    if (got != want) {
      expectation_failed(e,
                         "the live map is " + print_image(got) + ", expected " + print_image(want),
                         image_difference(want, got));
    }
  }

  std::uint64_t digest() const override {
    detail::Digest d;
    model_.for_each([&d](const Key& k, const Ns&, const State& s) {
      d.add(k);
      for (const std::int64_t x : s) d.add(static_cast<std::uint64_t>(x));
    });
    d.add(map_->capacity());
    digest_tasks(d);
    d.add(writer_in_op_);
    return d.h;
  }
  void on_assertion() override { broken_ = true; }

  ProbeOptions opts_;
  bool skip_remove_;
  std::unique_ptr<Map> map_;
  Model model_;
  bool broken_ = false;  // a production assertion fired mid-operation
};

class ProbeWorkload final : public WorkloadWithOptions<ProbeOptions> {
 public:
  explicit ProbeWorkload(bool skip_remove) : skip_remove_(skip_remove) {}
  std::string_view name() const override { return skip_remove_ ? "probe_skip_remove" : "probe"; }
  std::string_view summary() const override { return "one map, no snapshots (tests only)"; }
  ScenarioLanguage scenario_language() const override { return {}; }
  // Its writer drives one map: the map workload's lines, read and written by it.
  void parse_writer_action(ScenarioReader& in, const ScenarioToken& verb,
                           Action* a) const override {
    default_workload().parse_writer_action(in, verb, a);
  }
  std::string print_writer_action(const Action& a) const override {
    return default_workload().print_writer_action(a);
  }
  std::vector<Action> simpler_writer_actions(const Action& a) const override {
    return default_workload().simpler_writer_actions(a);
  }
  WriterActionTraits writer_action_traits(const Action& a) const override {
    return default_workload().writer_action_traits(a);
  }
  std::unique_ptr<detail::SimCore> make_simulation(const RunConfig& config,
                                                   Strategy& strategy) const override {
    return std::make_unique<ProbeSimulation>(config, strategy, skip_remove_);
  }
  void write_config(const WorkloadOptions& options, ScenarioConfig* config) const override {
    config->workload = name();
    config->initial_capacity = options_of<ProbeOptions>(options).initial_capacity;
    config->min_capacity = 1;
  }
  bool narrate(const Scenario&, bool, Narration*, std::string* why_not) const override {
    *why_not = "the probe workload has no narrator";
    return false;
  }

 private:
  bool skip_remove_;
};

}  // namespace

const Workload& probe_workload(bool skip_remove) {
  static const ProbeWorkload probe(false), buggy(true);
  return skip_remove ? buggy : probe;
}

}  // namespace cowstate::sim::probe

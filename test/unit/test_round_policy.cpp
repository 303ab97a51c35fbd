// test_round_policy.cpp: the round policy's rule (round_policy.h) on synthetic timing traces, and its
// determinism: a recorded trace of observations (synthetic, and one from a real stories260K run in mode
// auto) replays into fresh policies to the same decisions, twice. The probe-gap checker is shown to fail
// on a decision sequence whose gaps do not double.
#include <cmath>
#include <string>
#include <vector>

#include "decode/drafters.h"
#include "decode/round_policy.h"
#include "decode/session.h"
#include "decode/speculative.h"
#include "decode/verify_cost.h"
#include "model/draft.h"
#include "testlib.h"

using namespace beagle;

static const double kStep = 0.01;  // seconds of a decode step in the synthetic traces

// verify cost: 1 + 0.1 (T - 1) decode steps, T <= 24
static std::vector<double> cost_table() {
    std::vector<double> c(25, 1.0);
    for (int T = 1; T <= 24; T++) c[T] = 1 + 0.1 * (T - 1);
    return c;
}

// Mode auto's policy with one draft depth (5) or three (1, 2, 5).
static RoundPolicy auto_policy(bool depths) {
    RoundPolicy::Setup setup;
    setup.verify_cost = cost_table();
    setup.lookup_arm = true;
    RoundPolicy p(setup);
    p.set_draft("hybrid", depths ? std::vector<int>{1, 2, 5} : std::vector<int>{5}, false);
    return p;
}

// `rounds` rounds of a synthetic text: a draft round sends 4 candidates (T = 5), drafts `draft_steps`
// decode steps (in `depth` forwards) and commits tokens whose mean over each 10 rounds is tau; a lookup
// round is a plain step (1 token). Verify times follow the cost table exactly. Returns the decisions.
static std::vector<RoundChoice> run(RoundPolicy* p, int rounds, double tau, double draft_steps) {
    const std::vector<double> cost = cost_table();
    std::vector<RoundChoice> out;
    p->begin(0);
    int drafted = 0;
    for (int r = 0; r < rounds; r++) {
        const RoundChoice c = p->choose();
        out.push_back(c);
        int T = 1, committed = 1;
        if (c.draft) {
            const int depth = c.depth > 0 ? c.depth : 5;
            p->observe_draft(draft_steps * kStep * depth / 5, depth);
            T = 5;
            // tau = 1 + extra: the draft's accepted tokens spread evenly over its rounds
            const int before = (int)((tau - 1) * drafted + 1e-9), after = (int)((tau - 1) * (drafted + 1) + 1e-9);
            committed = 1 + after - before;
            drafted++;
        }
        p->observe_verify(T, cost[T] * kStep, 0);
        p->observe_round(T, committed);
    }
    return out;
}

// The probe checker: after the first round that does not draft, the draft runs only as probes, once
// each, with 4, 8, 16, 32, 64, 64, ... rounds without it between them. *why: the first deviation.
static bool gaps_double(const std::vector<RoundChoice>& c, std::string* why) {
    size_t i = 0;
    while (i < c.size() && c[i].draft) i++;
    int expect = 4, without = 0, probes = 0;
    for (; i < c.size(); i++) {
        if (!c[i].draft) {
            without++;
            continue;
        }
        if (without != expect) {
            *why = strfmt("round %zu: a draft round after %d rounds without it, expected %d", i, without, expect);
            return false;
        }
        if (i + 1 < c.size() && c[i + 1].draft) {
            *why = strfmt("round %zu: two draft rounds in a row", i);
            return false;
        }
        probes++;
        without = 0;
        expect = std::min(2 * expect, 64);
    }
    if (probes < 3) {
        *why = strfmt("%d probes only", probes);
        return false;
    }
    return true;
}

static int first_lookup(const std::vector<RoundChoice>& c) {
    for (size_t i = 0; i < c.size(); i++)
        if (!c[i].draft) return (int)i;
    return (int)c.size();
}

static int count_draft(const std::vector<RoundChoice>& c) {
    int n = 0;
    for (const RoundChoice& x : c) n += x.draft;
    return n;
}

// Decisions recorded in a trace (its CHOOSE events).
static std::vector<RoundChoice> recorded(const RoundPolicy::Trace& t) {
    std::vector<RoundChoice> out;
    for (const RoundPolicy::Event& e : t.events)
        if (e.kind == RoundPolicy::Event::CHOOSE) out.push_back(e.choice);
    return out;
}

static void check_replay(const RoundPolicy::Trace& t, const char* what) {
    const std::vector<RoundChoice> want = recorded(t), a = RoundPolicy::replay(t), b = RoundPolicy::replay(t);
    CHECK(!want.empty(), "%s: no decisions recorded", what);
    CHECK(a == want && b == want, "%s: a replay of %zu events decides differently (%zu / %zu / %zu decisions)", what,
          t.events.size(), want.size(), a.size(), b.size());
    printf("%s: %zu events, %zu decisions (%d drafted), replayed twice: identical\n", what, t.events.size(), want.size(),
           count_draft(want));
}

static void test_synthetic() {
    // drafting loses (tau 1.1, drafting 0.4 steps): it stops within a few rounds, probes back at doubling gaps
    for (bool depths : {false, true}) {
        RoundPolicy p = auto_policy(depths);
        p.record(true);
        const std::vector<RoundChoice> c = run(&p, 300, 1.1, 0.4);
        const int stop = first_lookup(c);
        CHECK(stop <= 3, "losing draft (%s): %d draft rounds before the first lookup round", depths ? "3 depths" : "1 depth",
              stop);
        std::string why;
        CHECK(gaps_double(c, &why), "losing draft (%s): probes: %s", depths ? "3 depths" : "1 depth", why.c_str());
        printf("losing draft (%s): stopped after %d rounds, %d of %zu rounds drafted, probe gaps doubling\n",
               depths ? "3 depths" : "1 depth", stop, count_draft(c), c.size());
        check_replay(p.trace(), depths ? "synthetic losing trace, 3 depths" : "synthetic losing trace");
        // planted: the same start with the draft probed every 5th round (gap 4, never doubled)
        std::vector<RoundChoice> planted(c.begin(), c.begin() + stop);
        for (size_t i = stop; i < c.size(); i++) {
            RoundChoice x;
            x.draft = (i - stop) % 5 == 4;
            planted.push_back(x);
        }
        std::string pwhy;
        CHECK(!gaps_double(planted, &pwhy), "planted: probe gaps that do not double were NOT caught");
        printf("planted: probes every 5th round: caught (%s)\n", pwhy.c_str());
    }
    // drafting wins (tau 3, drafting 0.4 steps): it keeps drafting; lookup is probed at doubling gaps
    for (bool depths : {false, true}) {
        RoundPolicy p = auto_policy(depths);
        const std::vector<RoundChoice> c = run(&p, 300, 3.0, 0.4);
        CHECK(c[0].draft && count_draft(c) >= 285, "winning draft (%s): %d of %zu rounds drafted (first %d)",
              depths ? "3 depths" : "1 depth", count_draft(c), c.size(), (int)c[0].draft);
        printf("winning draft (%s): %d of %zu rounds drafted\n", depths ? "3 depths" : "1 depth", count_draft(c), c.size());
    }
    // a new text: estimates and gaps carry over, so a draft that lost on the last text (its gap now
    // 64) is probed within 64 rounds of the new one and, winning there, takes over within a few probes
    // (each weighs one or two rounds of 16 in its estimate)
    RoundPolicy p = auto_policy(false);
    run(&p, 100, 1.1, 0.4);
    const std::vector<RoundChoice> c = run(&p, 250, 3.0, 0.4);
    int first = -1;
    for (size_t i = 0; i < c.size() && first < 0; i++)
        if (c[i].draft) first = (int)i;
    const std::vector<RoundChoice> late(c.begin() + 200, c.end());
    CHECK(!c[0].draft && first >= 0 && first <= 64 && count_draft(late) >= 48,
          "after begin(): 1st round draft %d, first draft round %d, %d of the rounds 200..249 drafted on a text "
          "where it wins (expected a probe within 64 rounds, then drafting)", (int)c[0].draft, first, count_draft(late));
    printf("after begin(): the losing draft probed on round %d of the new text, %d of its last 50 rounds drafted\n",
           first, count_draft(late));
    // the other way round: a draft that won on the texts before meets a text it cannot predict (a short
    // answer): the text's own mean turns the choice within a few rounds, where the across-texts mean
    // (weight 1/16 a round) would take about 15
    RoundPolicy q = auto_policy(false);
    run(&q, 200, 3.0, 0.4);
    const std::vector<RoundChoice> lose = run(&q, 40, 1.0, 0.4);
    const int stop = first_lookup(lose);
    CHECK(stop <= 4, "a losing text after winning ones: %d draft rounds before the first lookup round (expected <= 4)", stop);
    printf("a losing text after 200 winning rounds: stopped drafting after %d rounds, %d of its 40 drafted\n", stop,
           count_draft(lose));
    // ... while one 1-token round at the start of a text the draft predicts well (tau 3) does not stop it
    RoundPolicy w = auto_policy(false);
    run(&w, 200, 3.0, 0.4);
    w.begin(0);
    int kept = 0;
    for (int r = 0; r < 20; r++) {
        const RoundChoice x = w.choose();
        kept += x.draft;
        const int T = x.draft ? 5 : 1;
        if (x.draft) w.observe_draft(0.4 * kStep, 5);
        w.observe_verify(T, cost_table()[T] * kStep, 0);
        w.observe_round(T, x.draft ? (r == 0 ? 1 : 3) : 1);
    }
    CHECK(kept == 20, "a winning text with a 1-token first round: %d of 20 rounds drafted (expected all)", kept);
    printf("a winning text with a 1-token first round: %d of 20 rounds drafted\n", kept);
    // threads: the faster thread arm, the other tried every 32nd drafting round
    RoundPolicy::Setup setup;
    RoundPolicy t(setup);
    t.set_draft("chain", {}, true);
    t.begin(0);
    int on[2] = {0, 0};
    for (int r = 0; r < 200; r++) {
        const RoundChoice x = t.choose();
        on[x.threads]++;
        t.observe_draft(x.threads ? 5e-3 : 1e-3, 5);  // one thread 5x faster
        t.observe_round(6, 3);
    }
    CHECK(on[1] == 200 / 32, "threads: %d rounds on the slower arm of 200 (expected its probes: %d)", on[1], 200 / 32);
}

// A text's rounds under given costs, after a prompt of `prompt` tokens: each round's draft (tau,
// `draft_s` seconds, one forward, T = 5) or plain step, a plain step taking `step_s` and a 5-token verify
// `verify5` steps. Returns the number of rounds that drafted.
static int run_text(RoundPolicy* p, int prompt, int rounds, double tau, double draft_s, double step_s, double verify5) {
    p->begin(prompt);
    int drafted = 0, context = prompt;
    for (int r = 0; r < rounds; r++) {
        const RoundChoice c = p->choose();
        int T = 1, committed = 1;
        if (c.draft) {
            p->observe_draft(draft_s, 1);
            T = 5;
            const int before = (int)((tau - 1) * drafted + 1e-9), after = (int)((tau - 1) * (drafted + 1) + 1e-9);
            committed = 1 + after - before;
            drafted++;
        }
        p->observe_verify(T, (T == 1 ? 1.0 : verify5) * step_s, context);
        p->observe_round(T, committed);
        context += committed;
    }
    return drafted;
}

// The verify cost's correction is kept per context range. A long text (context 800: a plain step of
// 30 ms, its 5-token verify 1.1 steps, cheaper than the table's 1.4: the KV cache read once for 5 tokens)
// learns a negative excess for its range. A short text after it (context 40: 10 ms steps, verifies of 2
// steps, dearer than the table, as on a CPU whose verify runs slower in generation than at start-up)
// prices its verifies by its own range. With one correction for all lengths its 20 ms verifies would be
// 0.67 of the long text's 30 ms step, far below the table, and a draft at tau 1.6 for 0.4 steps of
// drafting (1.6 / 2.4 = 0.67 tokens a step, below plain's 1) would draft throughout. A later short text
// starts from the short range's learnt cost (2 steps), not the table's 1.4: what a policy restarted per
// text would lose on a text whose every round drafts; so does a range between the two not yet observed
// (it borrows from the nearest shorter range, never from a longer one).
static void test_context_ranges() {
    RoundPolicy p = auto_policy(false);
    p.begin(800);
    for (int i = 0; i < 8; i++) p.observe_verify(1, 0.03, 800);  // the long text's plain steps, in a row
    const int long_drafted = run_text(&p, 800, 100, 1.6, 0.004, 0.03, 1.1);
    const double long5 = p.cost()[5];
    const int short_drafted = run_text(&p, 40, 40, 1.6, 0.004, 0.01, 2.0);
    CHECK(long5 < 1.2 && long_drafted >= 80, "long text: cost(5) %.3f (expected about 1.1), %d of 100 drafted", long5,
          long_drafted);
    CHECK(short_drafted <= 8, "short text after a long one: %d of 40 rounds drafted at 0.67 tokens a step (expected "
          "<= 8: its probes, priced by its own range)", short_drafted);
    p.begin(40);
    const double short5 = p.cost()[5];
    CHECK(std::abs(short5 - 2.0) < 0.05, "a new short text starts at cost(5) %.3f (expected its range's 2.0)", short5);
    p.begin(300);
    CHECK(std::abs(p.cost()[5] - short5) < 1e-12, "a range never observed: cost(5) %.4f (expected the shorter range's "
          "%.4f)", p.cost()[5], short5);
    printf("verify cost per context range: long text cost(5) %.3f, %d of 100 drafted; the short text after it "
           "drafted %d of 40, its range's cost(5) then %.3f\n", long5, long_drafted, short_drafted, short5);
}

// Plain probes. The start-up table says a 5-token verify costs 1.4 steps; in generation it costs 2.5 (a
// table timed while plain steps ran slow). A draft at tau 2 for 0.4 steps of drafting is then worth
// 2 / 2.9 = 0.69 tokens a step, less than plain's 1, though the table prices it at 2 / 1.8 = 1.11. Every
// round drafts, so no plain step comes to correct the table, unless the policy runs them: two probes
// (t1 from 4 plain steps), then b is learnt and the draft is probed only. With the cost the table
// says, a draft at tau 3 keeps drafting, and the probes take at most 5% of 1,000 rounds (the text grows to
// 3,000 tokens: a probe 32 passes into each of the 5 context ranges, then one per 256 passes).
static bool stops_drafting(const std::vector<RoundChoice>& c, int from, int max_drafted, int* drafted) {
    *drafted = 0;
    for (size_t i = from; i < c.size(); i++) *drafted += c[i].draft;
    return *drafted <= max_drafted;
}

static int count_plain(const std::vector<RoundChoice>& c) {
    int n = 0;
    for (const RoundChoice& x : c) n += x.plain && !x.draft;
    return n;
}

static void test_plain_probe() {
    RoundPolicy p = auto_policy(false);
    p.record(true);
    const int drafted = run_text(&p, 40, 300, 2.0, 0.004, 0.01, 2.5);
    const std::vector<RoundChoice> c = recorded(p.trace());
    int late = 0;
    CHECK(stops_drafting(c, 150, 15, &late), "a table too cheap: %d of the rounds 150..299 drafted (expected its "
          "probes only, <= 15), %d of 300 in all, cost(5) %.3f", late, drafted, p.cost()[5]);
    CHECK(std::abs(p.cost()[5] - 2.5) < 0.1, "a table too cheap: cost(5) %.3f after 300 rounds (expected 2.5)", p.cost()[5]);
    printf("plain probes: a table 1.1 steps too cheap at T = 5: %d of 300 rounds drafted, %d of the last 150; "
           "cost(5) learnt %.3f (%d plain probe rounds)\n", drafted, late, p.cost()[5], count_plain(c));
    check_replay(p.trace(), "plain probes");
    std::vector<RoundChoice> planted(300);  // planted: every round drafted, as without plain probes
    int pl = 0;
    CHECK(!stops_drafting(planted, 150, 15, &pl), "planted: a policy that drafts every round was NOT caught");
    printf("planted: all 300 rounds drafted: caught (%d of the last 150)\n", pl);
    RoundPolicy w = auto_policy(false);
    w.record(true);
    const int won = run_text(&w, 40, 1000, 3.0, 0.004, 0.01, 1.4);
    const int plain = count_plain(recorded(w.trace()));
    CHECK(won + plain == 1000 && plain <= 48 && plain >= 30, "a table that is right, tau 3: %d of 1000 rounds drafted, "
          "%d plain probe rounds (expected 30..48, the rest drafted)", won, plain);
    printf("plain probes: a winning draft with the cost the table says: %d of 1000 rounds drafted, %d plain probe "
           "rounds\n", won, plain);
}

// A server's batch of k = 4 slots (Engine: plain_rows 4): a plain round commits 4 tokens for cost[4];
// a speculative round sends 4 trees of 5 (T = 20, past the table: its last slope) and commits 4 x tau.
// At tau 1.2 (4.8 tokens for 2.9 steps + drafting < 4 for 1.3) plain takes over within a few rounds
// and the speculative side is only probed; at tau 3 (12 for 2.9) speculative rounds run throughout, but
// for its plain probes (plain rounds of the batch's 4 rows: its unit). With verifies dearer than the table
// says (T = 20 in 5.5 steps, not 2.9: 12 tokens for 5.7 steps lose to plain's 3.1 a step) the plain probes
// measure the unit and the speculative side is probed only, where a batch that never runs a one-token pass
// would keep the table's price and run speculative rounds throughout.
static void test_batch() {
    const std::vector<double> cost = cost_table();
    for (double dear : {0.0, 2.6}) for (double tau : {1.2, 3.0}) {
        RoundPolicy::Setup setup;
        setup.verify_cost = cost;
        setup.draft_mode = "speculative";
        setup.lookup_arm = true;
        setup.plain_rows = 4;
        RoundPolicy p(setup);
        p.begin(0);
        int spec = 0, extra = 0, probes = 0, late = 0;
        for (int r = 0; r < 200; r++) {
            const RoundChoice c = p.choose();
            const bool s = c.draft;
            spec += s;
            probes += c.plain;
            late += s && r >= 100;
            const int T = s ? 20 : 4;
            int committed = 4;
            if (s) {  // 4 x (tau - 1) extra tokens per speculative round, spread evenly
                const int before = (int)(4 * (tau - 1) * extra + 1e-9), after = (int)(4 * (tau - 1) * (extra + 1) + 1e-9);
                committed += after - before;
                extra++;
            }
            p.observe_draft(s ? 0.2 * kStep : 0.0, s ? 1 : 0);
            p.observe_verify(T, (VerifyCost(cost)[T] + (s ? dear : 0.0)) * kStep, 0);
            p.observe_round(T, committed);
        }
        if (tau < 2 || dear > 0)
            CHECK(late <= 8, "batch of 4, tau %.1f, verify %.1f steps dearer: %d of the rounds 100..199 speculative "
                  "(expected probes only), %d in all", tau, dear, late, spec);
        else
            CHECK(spec + probes == 200 && probes <= 12, "batch of 4, tau %.1f: %d of 200 rounds speculative, %d plain "
                  "probe rounds (expected the rest, at most 12)", tau, spec, probes);
        printf("batch of 4, tau %.1f, verify %.1f steps dearer than the table: %d of 200 rounds speculative (%d of the "
               "last 100), %d plain probe rounds\n", tau, dear, spec, late, probes);
    }
    CHECK(VerifyCost(cost)[30] > VerifyCost(cost)[24] && VerifyCost(cost)[30] < 1e9,
          "cost past the table: %g (cost[24] %g)", VerifyCost(cost)[30], VerifyCost(cost)[24]);
}

// A real trace: mode auto on stories260K with timed verifies, recorded and replayed.
static void test_real_trace() {
    const std::string M = test_models_dir(), shipped = test_root() + "/weights/beagle-stories260K.bin";
    if (!file_exists(shipped) || !file_exists(M + "stories260K.bin")) {
        SKIP_PART("stories260K or %s missing: no real trace", shipped.c_str());
        return;
    }
    Session s(M + "stories260K.bin", M + "tok512.bin", 2, 512, 64);
    DraftWeights dw = load_draft(shipped);
    BeagleDraftParams p;
    p.lookup_ngram = 3;
    p.verify_cost = measure_verify_cost(s, 64, 6);
    std::unique_ptr<Drafter> d = make_drafter(s, "auto", p, &dw, shipped);
    RoundPolicy* pol = d->policy();
    CHECK(pol, "mode auto's drafter has no round policy");
    if (!pol) return;
    pol->record(true);
    SamplingParams greedy;
    greedy.temperature = 0;
    const std::vector<std::string> prompts = test_stories_prompts();
    int same = 0;
    for (int i = 0; i < 3; i++) {
        std::vector<int> ids = s.encode_prompt(prompts[i], false, ""), plain, out;
        GenStats pst;
        s.generate_plain(ids, 80, greedy, nullptr, &pst, &plain);
        SpecParams spp;
        SpecStats st;
        generate_speculative(s, *d, ids, 80, greedy, spp, nullptr, &st, &out);
        same += out == plain;
    }
    CHECK(same == 3, "stories260K auto: %d of 3 outputs equal plain greedy", same);
    check_replay(pol->trace(), "stories260K auto, timed");
}

int main() {
    test_synthetic();
    test_context_ranges();
    test_plain_probe();
    test_batch();
    try {
        test_real_trace();
    } catch (const Error& e) {
        CHECK(false, "error: %s", e.what());
    }
    return test_summary("test_round_policy");
}

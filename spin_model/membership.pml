/*
 * A model of the membership protocol's failure detector, checked with SPIN.
 *
 * docs/protocol.md, section "The model", maps every rule below to the code that implements
 * it, lists what is abstracted away and why, and gives the measured state counts. In short:
 *
 *   - N silos (3..5), all Active at the start, each monitoring all the others
 *     (N <= num_probed_silos + 1: the configuration the partition guarantee is stated for).
 *   - The table: one row per silo (Active or Dead, and its set of voters) and the version,
 *     written only by a conditional write (one atomic step) that succeeds iff nobody wrote
 *     since the writer's read.
 *   - Time in probe rounds (process Clock): every round each running silo probes every
 *     silo it monitors. Silence = consecutive failed rounds; a suspicion is S = 2 of them;
 *     at the suspicion the indirect round is evaluated, which can only veto.
 *   - One process per silo: it decides a vote on its own evidence and the majority rule,
 *     reads the table, writes conditionally (a lost race is retried at once on a fresh read,
 *     VOTE_ATTEMPTS in all), and stops serving when it reads its own row Dead.
 *   - An adversarial, bounded environment acting at round boundaries: one partition into
 *     any two sides at any moment, up to FAULTS crashes and hangs (a hung silo may resume,
 *     and may hang between its read and its write), up to LOSS lost link-rounds (every
 *     message between two silos during one round), up to OUTAGES table outages, and
 *     silos that stopped heartbeating going stale.
 *   - With -DLEASE, the membership lease and the takeover wait (section "The lease and the
 *     takeover wait" below): one key, owned by the first silo that is Active in a silo's
 *     view; a silo serves it only as its owner, within its lease and after its takeover wait,
 *     and the assertion one_server_per_key is checked at every serving step.
 *
 * Safety properties are assertions, named after what they check (pan prints the name);
 * liveness properties are the ltl blocks at the end, checked with weak fairness (-a -f).
 *
 * Build-time switches (spin -D...):
 *   N, LOSS, FAULTS, OUTAGES      the bounds (defaults below)
 *   LIVENESS                       stale at the latest STALE_AFTER rounds after the last
 *                                  heartbeat (liveness runs; safety runs allow any timing)
 *   SYMMETRY                       take the first fault/partition/loss up to a renaming of
 *                                  the silos (safety runs only: the ltl blocks name silo 0)
 *   MUTANT_INTERMEDIARY_VOTES      the first version's bug: an intermediary whose probe
 *                                  failed counts as a second voter
 *   MUTANT_NO_MAJORITY_RULE        votes without the majority rule
 *   MUTANT_QUORUM_ONE              one vote declares death
 *   MUTANT_BLIND_WRITE             writes not conditioned on the version read
 *   MUTANT_NO_SELF_TERMINATION     a silo that reads itself Dead keeps serving and voting
 *   MUTANT_FAILURE_VETOES          an intermediary that fails vetoes too (liveness bug)
 *   PARTITION_PROPERTY_ONLY        assert majority_side_survives alone
 *   NO_ASSERTIONS                  no assertions (to check one ltl block alone)
 *   MUTANT_PAUSE_IS_SILENCE        a hung observer's monotonic clock runs on and the pause
 *                                  counts as silence of every target when it resumes
 *   MUTANT_HEARD_UNTIL_SUSPECTED   the majority rule's first form: a monitored silo counts
 *                                  as heard until it is suspected (not: answered within half
 *                                  the suspicion), see the docs
 *
 * The lease (-DLEASE; safety only, without SYMMETRY: the key's order tells the silos apart):
 *   LEASE_TICKS, WAIT_TICKS        the lease L and the takeover wait W in rounds (2 and L)
 *   LEAVES, DELAYS                 graceful leaves, and reads whose answer is delayed across
 *                                  rounds, in all (default 0)
 *   MUTANT_NO_TAKEOVER_WAIT        W = 0: a new owner serves as soon as it reads the death
 *   MUTANT_NO_LEASE_CHECK_AFTER_PAUSE  the lease is checked by a timer every round, not before
 *                                  each request: a silo resuming from a pause serves on the
 *                                  state it had when it hung until the timer runs
 *   MUTANT_LEASE_FROM_RETURN       the lease is anchored when the confirming read returned,
 *                                  not when it was sent
 *   MUTANT_WAIT_FOR_PREVIOUS_OWNER_ONLY  the new owner waits only if the owner in its previous
 *                                  view was declared Dead (not for a death it learned earlier
 *                                  while a silo between them still owned the key)
 *   MUTANT_LEAVE_WRITES_FIRST      a leaving silo writes its row before it stops serving
 *   PEERS                          the lease through peers during a table outage (section "The
 *                                  lease through peers" below): a silo that cannot read the
 *                                  table renews its lease only when every other non-Dead member
 *                                  of its view answers at the same view version, having heard
 *                                  of no newer one and with no write of unknown outcome
 *   UNSURE                         writes that commit while their writer sees them fail (a
 *                                  timeout), in all (default 0; with PEERS)
 *   MUTANT_VOUCH_MAJORITY          a silo renews when the members that answer, with itself, are
 *                                  a majority (silent members ignored)
 *   MUTANT_VOUCH_IGNORES_NEWER     a member that knows a newer version than the asker's view
 *                                  (its own view, or heard of) vouches anyway
 *   MUTANT_VOUCH_IGNORES_UNSURE    a member with a write of unknown outcome vouches anyway
 *   VOUCH_WITNESS                  assert that the peers never renew the lease of a silo that
 *                                  owns the key and whose lease ran out: the counterexample
 *                                  shows that the vouching does take place
 *   JOINS                          (with PEERS) silo 0 joins (section "Joins" below): it starts
 *                                  outside the table, inserts its row Joining, validates by
 *                                  pinging every fresh Active silo of its view (each takes the
 *                                  joiner's known version as heard), writes itself Active and
 *                                  serves the key, which it takes from silo 1, only after its
 *                                  takeover wait; every ConfirmMembership ask carries the asker's
 *                                  newest version heard (taken as heard by whoever answers)
 *   MUTANT_JOIN_PING_SILENT        the validation pings carry no version
 *   MUTANT_JOINER_NO_WAIT          the joiner serves as soon as it wrote itself Active
 *   MUTANT_GHOST_ONLY_IF_SEEN_ACTIVE  a death starts the takeover wait only if the dead silo was
 *                                  Active in the silo's previous view (not if it joined and died
 *                                  between two of its reads)
 *   ZOMBIE_WITNESS=1 / =2          assert that a new owner never serves while the silo declared
 *                                  Dead before it, which served the key after that on its
 *                                  lease, still believes it owns the key, hung (1) or running
 *                                  alone on its side of the partition (2): the counterexample
 *                                  shows that the checks are not vacuous
 */

#ifndef N
#define N 4
#endif
#ifndef LOSS
#define LOSS 2
#endif
#ifndef FAULTS
#define FAULTS 1
#endif
#ifndef OUTAGES
#define OUTAGES 1
#endif
#ifdef LEASE
#undef SYMMETRY           /* the key's order tells the silos apart */
#ifndef LEASE_TICKS
#define LEASE_TICKS 2
#endif
#ifdef MUTANT_NO_TAKEOVER_WAIT
#undef WAIT_TICKS
#define WAIT_TICKS 0
#endif
#ifndef WAIT_TICKS
#define WAIT_TICKS LEASE_TICKS
#endif
#ifndef LEAVES
#define LEAVES 0
#endif
#ifndef DELAYS
#define DELAYS 0
#endif
#ifndef UNSURE
#define UNSURE 0
#endif
#else
#undef PEERS              /* the lease through peers needs the lease */
#endif
#ifndef PEERS
#undef JOINS              /* joins are checked with the lease through peers */
#endif
#ifdef JOINS
#define JOINER 0          /* first in the key's order: its join takes the key from silo 1 */
#undef DELAYS
#define DELAYS 0          /* a read's view is taken in when it is sent (see "Joins") */
#endif

#define S             2   /* rounds of silence to suspect (num_missed_probes_limit * probe_timeout) */
#define HALF          1   /* a vetoed suspicion restarts from the round's start: half the suspicion */
#define NUM_VOTES     2   /* num_votes_for_death_declaration */
#define NUM_INDIRECT  2   /* num_indirect_probes */
#define VOTE_ATTEMPTS 3   /* table_manager.VOTE_ATTEMPTS */
#define STALE_AFTER   3   /* rounds without heartbeat after which a silo is stale at the latest */

#define B(x)        (1 << (x))
#define BIT(m, x)   (((m) >> (x)) & 1)
#define SET(m, x)   m = (m) | B(x)
#define CLR(m, x)   m = (m) & ~B(x)
#define IDX(o, t)   ((o) * N + (t))
#define PAIR(a, b)  ((a) < (b) -> (a) * N + (b) : (b) * N + (a))

/* ---- the table (membership_tables: read_all, update_row(entry, etag, version)) ---------- */
byte deadm;            /* rows written Dead (bitmask); the others are Active */
byte votes[N];         /* a row's suspect_times, as the set of its voters (bitmask) */
byte current;          /* silos whose last read still has the newest version (bitmask): the
                        * version row, kept relative (a write outdates every earlier read) */
bit  tdown;            /* table outage: every read and write fails */

/* ---- the environment ------------------------------------------------------------------ */
byte part;             /* the silos on side 1 of the partition (bitmask); 0: no partition */
byte crashm;           /* crashed (SIGKILL) */
byte hungm;            /* hung (SIGSTOP): no probing, no answers, no steps; may resume */
byte failm;            /* ghost: crashed or hung at some point */
byte stalem;           /* its heartbeat stopped moving for the freshness limit */
short downv;           /* 2 bits per silo: rounds it has not heartbeated, until it is stale */
byte faults_left = FAULTS, loss_left = LOSS, outages_left = OUTAGES;
bit  split;            /* the partition happened */
#ifdef SYMMETRY
bit  broken;           /* the silos are no longer interchangeable */
#endif

/* ---- the silos ------------------------------------------------------------------------ */
byte termm;            /* stopped serving (self-termination) */
short missv[N];        /* 2 bits per target: rounds of silence observed, capped at S */
byte rdyv[N];          /* per target: the latest indirect round ended without a veto */
#ifdef MUTANT_INTERMEDIARY_VOTES
byte ivm[N * N];       /* the intermediaries whose probe failed in o's round on t */
#endif
/* the vote in progress of each silo (global, so that a crash can clear it) */
byte writem;           /* read done, write to do */
byte killm;            /* the write declares the target Dead */
byte vtarget[N];
byte vvotes[N];        /* the voters it writes */
byte vattempt[N];

#ifdef LEASE
/* ---- the lease and the key (see "The lease and the takeover wait") --------------------- */
byte kdead[N];         /* its view: the silos ahead of it in the key's order that its latest
                        * read showed Dead (bitmask; only silos ahead of it matter) */
byte lage[N];          /* rounds since its lease anchor, LEASE_TICKS = ran out; kept while it
                        * owns the key in its view (0 otherwise: it becomes the owner only at a
                        * read that also confirms it) */
byte lwait[N];         /* rounds left of its takeover wait */
byte leftm;            /* rows written Dead by a graceful leave */
byte leaves_left = LEAVES;
byte rdm;              /* the silo whose read is in flight (one at a time, DELAYS in all) */
byte rdage;            /* rounds since that read was sent, capped at LEASE_TICKS */
byte rdview;           /* the Dead rows it read */
bit  rdok;             /* it read its own row Active */
byte delays_left = DELAYS;
#ifdef MUTANT_NO_LEASE_CHECK_AFTER_PAUSE
byte fencedm;          /* fenced by the timer */
#endif
#ifdef MUTANT_LEAVE_WRITES_FIRST
byte leavingm;         /* wrote its row as leaving, still to stop serving */
#endif
#ifdef ZOMBIE_WITNESS
byte zservedm;         /* served the key while its row was Dead */
#endif
#ifdef PEERS
/* ---- the lease through peers (see "The lease through peers") ---------------------------- */
byte tver;             /* the table's version: every committed write adds one */
byte vver[N];          /* the version of a silo's view (its latest read, or its own write) */
byte hver[N];          /* the newest version it heard of (its own writes; never below vver) */
byte vdead[N];         /* its view: every row its latest read showed Dead (bitmask) */
byte unsurem;          /* silos with a write whose outcome they do not know (not read back) */
byte rdver;            /* the version of the read in flight */
byte unsure_left = UNSURE;
#ifdef VOUCH_WITNESS
hidden byte no_fenced_owner_vouched;
#endif
#ifdef JOINS
/* ---- joins (see "Joins"): the joiner's row, absent, then Joining, then Active ------------ */
byte absm = B(JOINER); /* rows not in the table yet */
byte joinm = B(JOINER);/* rows not Active yet (absent or Joining) */
bit  validated;        /* every fresh Active silo of the joiner's view answered its ping */
byte jdeadv;           /* the silos whose view shows the joiner Dead */
#endif
#endif
hidden byte hn;
hidden byte one_server_per_key, no_zombie_takeover;
#endif

/* temporaries of one step, zero between steps: lostm and hev are set across choices of the
 * environment, so they are state (hidden variables are not restored when pan backtracks) */
int  lostm;            /* PAIR bits: every message between the two is lost this round */
byte hev;              /* events of this environment step (SYMMETRY) */
/* temporaries of deterministic code only: not part of the state */
hidden byte nm[N * N];
hidden byte hi, hj, hk, hc, hsucc, hfail, hmask, hfa, hreq, ht;
/* the safety properties, named so that pan's "assertion violated <name>" says which failed;
 * -DPARTITION_PROPERTY_ONLY checks majority_side_survives alone (to show what it catches),
 * -DNO_ASSERTIONS none (to check an ltl block alone: a never claim asserts too, so pan -A
 * would silence it) */
#if defined(PARTITION_PROPERTY_ONLY) || defined(NO_ASSERTIONS)
#define CHECK(p) skip
#else
#define CHECK(p) assert(p)
#endif
#ifdef NO_ASSERTIONS
#define CHECK_PARTITION(p) skip
#else
#define CHECK_PARTITION(p) assert(p)
#endif
hidden byte version_written_once, dead_is_terminal, dead_silo_writes_nothing;
hidden byte own_vote_only, voter_observed_silence, quorum_of_distinct_voters, majority_side_survives;

#ifdef JOINS
/* a silo not Active in the table yet (absent or Joining) is not monitored, not voted on and
 * not counted: for the failure detector it is as good as Dead (its row never was) */
#define DEAD(x)     BIT(deadm | joinm, x)
#define FAILED(x)   BIT(failm | joinm, x)
#else
#define DEAD(x)     BIT(deadm, x)
#define FAILED(x)   BIT(failm, x)
#endif
#define CRASHED(x)  BIT(crashm, x)
#define HUNG(x)     BIT(hungm, x)
#define STALE(x)    BIT(stalem, x)
#define TERM(x)     BIT(termm, x)
#define DOWN(x)     ((downv >> (2 * (x))) & 3)
#define MISS(o, t)  ((missv[o] >> (2 * (t))) & 3)
#define RDY(o, t)   BIT(rdyv[o], t)
#define SIDE(x)     BIT(part, x)
#define RUNNING(x)  (!CRASHED(x) && !HUNG(x))
#define SERVING(x)  (RUNNING(x) && !TERM(x))
#define LOST(a, b)  BIT(lostm, PAIR(a, b))
/* a message exchange between a and b this round succeeds, and b is there to answer */
#define REACH(a, b) (SIDE(a) == SIDE(b) && SERVING(b) && !LOST(a, b))

/* --- counting over up to 5 silos (the terms are 0 for x >= N) --- */
#define POP(m) (BIT(m, 0) + BIT(m, 1) + BIT(m, 2) + BIT(m, 3) + BIT(m, 4))
#define SUM5(P, a) (P(a, 0) + P(a, 1) + P(a, 2) + P(a, 3) + P(a, 4))

/* monitored and fresh: o monitors every silo that is not Dead (cluster_health.select_targets) */
#define FM(o, t)    ((t) < N && (t) != (o) && !DEAD(t) && !STALE(t))
/* heard: monitored, fresh, and answered within half the suspicion
 * (SiloHealthMonitor.heard_recently = heard_within(suspect_after / 2)) */
#ifdef MUTANT_HEARD_UNTIL_SUSPECTED
#define HD(o, t)    (FM(o, t) && MISS(o, t) < S)
#else
#define HD(o, t)    (FM(o, t) && MISS(o, t) < HALF)
#endif
#define FRESH_MONITORED(o) SUM5(FM, o)
#define HEARD(o)           SUM5(HD, o)
#ifdef MUTANT_NO_MAJORITY_RULE
#define MAY_VOTE(o) 1
#else
/* votes.may_vote: 2 * (1 + heard) > 1 + fresh_monitored */
#define MAY_VOTE(o) (2 * (1 + HEARD(o)) > 1 + FRESH_MONITORED(o))
#endif

/* fresh Active rows as silo u counts them (liveness.fresh(read); a silo counts itself: its
 * own heartbeat moves), and the Active rows of silos that never failed */
#define FA1(u, x)   ((x) < N && !DEAD(x) && (!STALE(x) || (x) == (u)))
#define NFA1(u, x)  ((x) < N && !DEAD(x) && !FAILED(x))
#define FRESH_ACTIVE(u) SUM5(FA1, u)
#define NF_ACTIVE       SUM5(NFA1, 0)
/* votes.required_votes: max(1, min(num_votes, (fresh_active + 1) // 2)) */
#ifdef MUTANT_QUORUM_ONE
#define REQUIRED(fa) 1
#else
#define REQUIRED(fa) (((fa) + 1) / 2 < 1 -> 1 : (((fa) + 1) / 2 < NUM_VOTES -> ((fa) + 1) / 2 : NUM_VOTES))
#endif

/* never-failed silos on side s; silos serving on side s */
#define NFS1(s, x)  ((x) < N && !FAILED(x) && SIDE(x) == (s))
#define SV1(s, x)   ((x) < N && SERVING(x) && SIDE(x) == (s))
#define NF_SIDE(s)  SUM5(NFS1, s)
#define SERVING_SIDE(s) SUM5(SV1, s)

/* o may start a vote against t (SiloHealthMonitor.evaluate): t is monitored and suspected,
 * o's latest indirect round on it ended without a veto (or there was nobody to ask), and
 * the majority rule holds. A repeated vote that would change nothing (o's vote is in the
 * row and does not complete the quorum) is not modelled: it only bumps the version. */
#define KILLS(o, t) (POP((votes[t] & ~deadm) | B(o)) >= REQUIRED(FRESH_ACTIVE(o)))
#define CAN_VOTE(o, t) ((t) < N && (t) != (o) && !DEAD(t) && MISS(o, t) == S && RDY(o, t) \
                        && (BIT(votes[t], o) == 0 || KILLS(o, t)))
#define ANY_VOTE(o) ((CAN_VOTE(o, 0) || CAN_VOTE(o, 1) || CAN_VOTE(o, 2) || CAN_VOTE(o, 3) \
                      || CAN_VOTE(o, 4)) && MAY_VOTE(o))

/* for the liveness properties */
#define MAJORITY_CONNECTED (2 * SERVING_SIDE(0) > N || 2 * SERVING_SIDE(1) > N)

/* ======================================================================================= */
/* One probe round: SiloHealthMonitor.probe_once for every monitor, then the indirect round
 * (_indirect_round) of every monitor whose target is suspected. */
inline probe_round() {
  /* direct probes: an answer resets the silence; a timeout or a refusal adds a round of
   * silence; a hung observer adds nothing (it notices the pause when it resumes and does
   * not count it: SiloHealthMonitor._discount_pause) */
  hi = 0;
  do
  :: hi < N ->
     hj = 0;
     do
     :: hj < N ->
        if
        :: hj != hi && !DEAD(hj) && !DEAD(hi) && !CRASHED(hi) && !TERM(hi) ->
           if
#ifdef MUTANT_PAUSE_IS_SILENCE
           :: HUNG(hi) -> nm[IDX(hi, hj)] = (MISS(hi, hj) < S -> MISS(hi, hj) + 1 : S)
#else
           :: HUNG(hi) -> nm[IDX(hi, hj)] = MISS(hi, hj)
#endif
           :: !HUNG(hi) && REACH(hi, hj) -> nm[IDX(hi, hj)] = 0
           :: else -> nm[IDX(hi, hj)] = (MISS(hi, hj) < S -> MISS(hi, hj) + 1 : S)
           fi
        :: else -> nm[IDX(hi, hj)] = 0   /* no monitor (a silo already Dead stops at its next read) */
        fi;
        hj++
     :: else -> break
     od;
     hi++
  :: else -> break
  od;
  /* indirect rounds on the suspected targets: the intermediaries are the fresh Active silos
   * that o does not suspect (values before this round: the round started at half the
   * suspicion); an intermediary reaches t only if o reaches it and it reaches t */
  hi = 0;
  do
  :: hi < N ->
     hj = 0;
     do
     :: hj < N ->
        if
        :: hj != hi && !DEAD(hj) && !DEAD(hi) && SERVING(hi) && nm[IDX(hi, hj)] == S ->
           hsucc = 0; hfail = 0; hmask = 0; hk = 0;
           do
           :: hk < N ->
              if
              :: hk != hi && hk != hj && !DEAD(hk) && !STALE(hk) && MISS(hi, hk) < S ->
                 if
                 :: REACH(hi, hk) && REACH(hk, hj) -> hsucc++
                 :: else -> hfail++; hmask = hmask | B(hk)
                 fi
              :: else -> skip
              fi;
              hk++
           :: else -> break
           od;
           hc = hsucc + hfail;
           /* NUM_INDIRECT of the candidates are sampled at random; the worst sample takes
            * the failing ones first, so the round is vetoed iff fewer than
            * min(NUM_INDIRECT, candidates) fail and one answers */
           if
#ifdef MUTANT_FAILURE_VETOES
           :: hc > 0 ->
#else
           :: hsucc > 0 && hfail < (hc < NUM_INDIRECT -> hc : NUM_INDIRECT) ->
#endif
              nm[IDX(hi, hj)] = HALF; CLR(rdyv[hi], hj)          /* veto: the silence restarts */
           :: else -> SET(rdyv[hi], hj)                            /* no veto, or nobody to ask */
           fi;
#ifdef MUTANT_INTERMEDIARY_VOTES
           ivm[IDX(hi, hj)] = hmask;
#endif
           hmask = 0
        :: else -> skip
        fi;
        if
        :: nm[IDX(hi, hj)] < S -> CLR(rdyv[hi], hj)
        :: else -> skip
        fi;
        hj++
     :: else -> break
     od;
     hi++
  :: else -> break
  od;
  hi = 0;
  do
  :: hi < N ->
     missv[hi] = 0; hj = 0;
     do
     :: hj < N -> missv[hi] = missv[hi] | (nm[IDX(hi, hj)] << (2 * hj)); nm[IDX(hi, hj)] = 0; hj++
     :: else -> break
     od;
     hi++
  :: else -> break
  od;
  hi = 0; hj = 0; hk = 0; hc = 0; hsucc = 0; hfail = 0;
  lostm = 0
}

inline clear_rows(x) {
  missv[x] = 0; rdyv[x] = 0
}

/* the row of t is written Dead: its votes go, and nobody monitors it any more */
inline row_dead(t) {
  SET(deadm, t); votes[t] = 0;
  hi = 0;
  do
  :: hi < N -> missv[hi] = missv[hi] & ~(3 << (2 * (t))); CLR(rdyv[hi], t); hi++
  :: else -> break
  od;
  hi = 0
}

inline end_vote(me) {
  CLR(writem, me); CLR(killm, me); vtarget[me] = 0; vvotes[me] = 0; vattempt[me] = 0;
  CLR(current, me)
}

/* ======================================================================================= */
/* The lease and the takeover wait (-DLEASE): silo.membership.lease, the fencing in
 * silo.runtime.silo, and the takeover after fencing in silo.runtime.ownership.
 *
 * Time is the rounds: a round passes for every silo alike, a hung one included (a paused
 * process's monotonic clock runs on); clock-rate drift is left out (the code covers it by
 * the factor in takeover_wait). A silo's lease anchor is the round in which it sent the
 * latest read that showed its own row Active; the lease runs out LEASE_TICKS rounds later
 * (lage counts the rounds since the anchor) and the silo is then fenced until the next such
 * read. One key, owned by the first silo in the order 0, 1, ... that is not Dead in a
 * silo's view (kdead: the Dead rows its latest read showed among the silos ahead of it).
 * A silo serves the key when it is running, has not stopped, owns the key in its view, its
 * lease has not run out (checked at the serving step itself) and its takeover wait is over.
 * The wait: a read that shows a silo ahead of it Dead for the first time holds the key for
 * WAIT_TICKS rounds (the code keeps that silo on its ring as a ghost), whoever owns the key
 * meanwhile, unless that silo left gracefully (it stopped serving before it wrote its row)
 * or refuses connections (it crashed and the reader reaches its host). lwait is the longest
 * of these waits still running. */
#ifdef LEASE
#define AHEAD(x)        (B(x) - 1)
#define LEFT(x)         BIT(leftm, x)
#define READING(x)      BIT(rdm, x)
#define KEY_OWNER(x)    ((kdead[x] & AHEAD(x)) == AHEAD(x))
/* the crashed silos whose host x reaches: a connection to them is refused */
#define REFUSING(x)     (crashm & (SIDE(x) -> part : ~part))
#ifdef MUTANT_NO_LEASE_CHECK_AFTER_PAUSE
#define LEASE_OK(x)     (!BIT(fencedm, x))
#else
#define LEASE_OK(x)     (lage[x] < LEASE_TICKS)
#endif
#define SERVES(x)       ((x) < N && SERVING(x) && KEY_OWNER(x) && LEASE_OK(x) && lwait[x] == 0)
#define SV2(me, x)      ((x) != (me) && SERVES(x))
#define OTHERS_SERVING(me) SUM5(SV2, me)
#if ZOMBIE_WITNESS == 1
#define ZOMBIE_HOW(x)   HUNG(x)
#else
/* running, and alone on its side of the partition among the serving silos */
#define ZOMBIE_HOW(x)   (!HUNG(x) \
                         && POP(~crashm & ~hungm & ~termm & (B(N) - 1) & (SIDE(x) -> part : ~part)) == 1)
#endif
/* declared Dead by the others (not a graceful leave), served the key after that on its lease,
 * and now still alive and the key's owner in its own view */
#define ZOMBIE(me, x)   ((x) < N && (x) != (me) && DEAD(x) && !LEFT(x) && BIT(zservedm, x) \
                         && !CRASHED(x) && !TERM(x) && KEY_OWNER(x) && ZOMBIE_HOW(x))

#ifdef JOINS
/* what a read shows: rows Dead or not Active yet (for the key), and the Joining ones */
#define KVIEW           (deadm | joinm)
#define JOINING_ROWS    (joinm & ~absm)
#else
#define KVIEW           deadm
#define JOINING_ROWS    0
#endif
/* a read sent `age` rounds ago showed its own row Active and the Dead rows `view` */
inline confirm(me, view, age) {
  /* the deaths ahead of it that it learns now, by the others' votes, of silos that do not
   * refuse connections: each starts the wait */
  hn = (view) & AHEAD(me) & ~kdead[me];
#if defined(JOINS) && !defined(MUTANT_GHOST_ONLY_IF_SEEN_ACTIVE)
  /* a death is learned when the row turns Dead in the view, whatever it was before: the
   * joiner may have joined and died between two of this silo's reads (never Active in its view) */
  if
  :: BIT(deadm, JOINER) && !BIT(jdeadv, me) -> hn = hn | (B(JOINER) & AHEAD(me))
  :: else -> skip
  fi;
#endif
#ifdef JOINS
  if
  :: BIT(deadm, JOINER) -> SET(jdeadv, me)
  :: else -> skip
  fi;
#endif
#ifdef MUTANT_WAIT_FOR_PREVIOUS_OWNER_ONLY
  if
  :: ((view) & AHEAD(me)) == AHEAD(me) -> hn = hn & (~hn + 1)   /* the owner of its previous view */
  :: else -> hn = 0                                               /* it does not become the owner */
  fi;
#endif
  if
  :: (hn & ~leftm & ~REFUSING(me)) != 0 -> lwait[me] = WAIT_TICKS
  :: else -> skip
  fi;
  kdead[me] = (view) & AHEAD(me);
#ifdef PEERS
  vdead[me] = (view) & ~JOINING_ROWS;   /* a Joining row is a member (not Dead), not an owner */
#endif
  if
  :: KEY_OWNER(me) -> lage[me] = age
  :: else -> lage[me] = 0
  fi;
#ifdef MUTANT_NO_LEASE_CHECK_AFTER_PAUSE
  if
  :: KEY_OWNER(me) && lage[me] >= LEASE_TICKS -> SET(fencedm, me)
  :: else -> CLR(fencedm, me)
  fi;
#endif
  hn = 0
}
#ifdef PEERS
/* a read of version v: the view is v, and whatever the silo wrote is in it */
#define HEAR(x, v)      hver[x] = (hver[x] < (v) -> (v) : hver[x])
#define READ_VERSION(me, v) vver[me] = (v); HEAR(me, v); CLR(unsurem, me)
#define CONFIRM(me) if :: !DEAD(me) -> confirm(me, KVIEW, 0); READ_VERSION(me, tver) :: else -> skip fi
#else
#define CONFIRM(me) if :: !DEAD(me) -> confirm(me, KVIEW, 0) :: else -> skip fi
#endif

/* a crashed or stopped silo serves nothing again: its lease state goes */
inline lease_forget(x) {
  kdead[x] = 0; lage[x] = 0; lwait[x] = 0;
  if
  :: READING(x) -> rdm = 0; rdage = 0; rdview = 0; rdok = 0
#ifdef PEERS
     ; rdver = 0
#endif
  :: else -> skip
  fi;
#ifdef MUTANT_NO_LEASE_CHECK_AFTER_PAUSE
  CLR(fencedm, x);
#endif
#ifdef MUTANT_LEAVE_WRITES_FIRST
  CLR(leavingm, x);
#endif
  skip
}
#define LEASE_FORGET(x) ; lease_forget(x)

/* a round passes, for hung silos too */
inline lease_tick() {
  hi = 0;
  do
  :: hi < N ->
     if
     :: !CRASHED(hi) && !TERM(hi) ->
        if
        :: lwait[hi] > 0 -> lwait[hi]--
        :: else -> skip
        fi;
        if
        :: KEY_OWNER(hi) && lage[hi] < LEASE_TICKS -> lage[hi]++
        :: else -> skip
        fi;
#ifdef MUTANT_NO_LEASE_CHECK_AFTER_PAUSE
        /* the fencing timer runs in a running silo only */
        if
        :: !HUNG(hi) && KEY_OWNER(hi) && lage[hi] >= LEASE_TICKS -> SET(fencedm, hi)
        :: else -> skip
        fi;
#endif
        skip
     :: else -> skip
     fi;
     hi++
  :: else -> break
  od;
  if
  :: rdm != 0 && rdage < LEASE_TICKS -> rdage++
  :: else -> skip
  fi;
  hi = 0
}

/* a serving step: work for the key. Nobody else may be able to serve it at this moment */
inline serve(me) {
  one_server_per_key = (OTHERS_SERVING(me) == 0);
  CHECK(one_server_per_key);
#ifdef ZOMBIE_WITNESS
  if
  :: DEAD(me) -> SET(zservedm, me)
  :: else -> skip
  fi;
  no_zombie_takeover = (SUM5(ZOMBIE, me) == 0);
  CHECK(no_zombie_takeover);
#endif
  skip
}

/* a graceful stop: it stops serving, then writes its row ShuttingDown and Dead (one step:
 * a ShuttingDown row is not Active, so the key moves at the first write) */
inline leave(me) {
  leaves_left--;
#ifdef MUTANT_LEAVE_WRITES_FIRST
  SET(leavingm, me);                /* it stops serving at a later step */
#else
  stop_serving(me);
#endif
  SET(leftm, me); SET(failm, me);   /* gone: it no longer counts for the partition property */
  row_dead(me);
#ifdef PEERS
  tver++;
#endif
  current = 0
}

#ifdef PEERS
/* The lease through peers (-DPEERS; silo.membership.lease, "Through peers"): in a round in
 * which the table is down, a silo renews its lease, anchored at that step and without a new
 * view, when every other silo that is not Dead in its view answers at the same view version,
 * having heard of no newer version and with no write of unknown outcome (a write that
 * committed while its writer saw the call fail), and it heard of nothing newer itself.
 * Versions are absolute here (tver, vver, hver): the vouch compares them across silos. */
/* m answers me's ConfirmMembership: same side, running, not stopped (the ask is one step:
 * a lost ask is a silent member, which only ever refuses) */
#define ANSWERS(me, m)  (SIDE(me) == SIDE(m) && SERVING(m))
#define MEMBER(me, m)   ((m) < N && (m) != (me) && !BIT(vdead[me], m))
/* what a member says of itself: its view's version, and whether it heard of a newer one or
 * has a write in doubt; the asker needs the same version, nothing newer, nothing in doubt
 * (lease.judge_confirmations, PeerVerdict.OUTAGE) */
#ifdef MUTANT_VOUCH_IGNORES_NEWER
#define SAME_VIEW(me, m) (vver[m] >= vver[me])
#else
#define SAME_VIEW(me, m) (vver[m] == vver[me] && hver[m] <= vver[me])
#endif
#ifdef MUTANT_VOUCH_IGNORES_UNSURE
#define SURE(m)         1
#else
#define SURE(m)         (!BIT(unsurem, m))
#endif
#define AGREES(me, m)   (ANSWERS(me, m) && SAME_VIEW(me, m) && SURE(m))
#define DISSENTS(me, m) (ANSWERS(me, m) && !(SAME_VIEW(me, m) && SURE(m)))
#define MB1(me, m)      MEMBER(me, m)
#define AG1(me, m)      (MEMBER(me, m) && AGREES(me, m))
#define DS1(me, m)      (MEMBER(me, m) && DISSENTS(me, m))
#ifdef MUTANT_VOUCH_MAJORITY
/* no member disagrees, and those that agree are, with the asker, a majority */
#define VOUCHED(me)     (SUM5(DS1, me) == 0 && 2 * (1 + SUM5(AG1, me)) > 1 + SUM5(MB1, me))
#else
/* every member answers and agrees */
#define VOUCHED(me)     (SUM5(AG1, me) == SUM5(MB1, me))
#endif
/* the asker itself heard of nothing newer than its view */
#define MAY_ASK(me)     (hver[me] <= vver[me] && !BIT(vdead[me], me))

/* the peers vouch for an outage: the lease is renewed, anchored at the ask, the view kept */
inline vouched(me) {
#ifdef VOUCH_WITNESS
  no_fenced_owner_vouched = !(KEY_OWNER(me) && lage[me] >= LEASE_TICKS);
  CHECK(no_fenced_owner_vouched);
#endif
  if
  :: KEY_OWNER(me) -> lage[me] = 0
  :: else -> skip
  fi
}

/* a committed write: the writer knows it (its view takes it in) unless the call failed on its
 * side after the commit (a timeout): then it does not know the outcome */
inline committed(me) {
  tver++;
  if
  :: vver[me] = tver; hver[me] = tver
  :: unsure_left > 0 -> unsure_left--; SET(unsurem, me)
  fi
}
#define COMMITTED(me)   committed(me)

#ifdef JOINS
/* ---- joins (silo.membership.agent.join, row_writer.insert_self, "Joins" in the docs) -------
 * The joiner reads the table and inserts its row Joining (one versioned write); pings every
 * fresh Active silo of its view until each answered (a stale one, crashed or hung, is skipped:
 * the code gives up on a heartbeat that stood still), each taking the joiner's newest version
 * heard as heard before it answers (PingRequest.known_version); then writes itself Active,
 * which confirms its lease and starts its own takeover wait (none if it is alone). Until it is
 * Active the failure detector leaves it out (DEAD and FAILED include joinm). */
#define PINGED(j, x)    ((x) < N && (x) != (j) && !BIT(vdead[j], x) && !STALE(x))
#define MISSED1(j, x)   (PINGED(j, x) && !REACH(j, x))
#define VALIDATES(j)    (!BIT(absm, j) && !validated && SUM5(MISSED1, j) == 0)

inline join_insert(j) {
  tver++; current = 0; CLR(absm, j);
  vver[j] = tver; hver[j] = tver;
  vdead[j] = deadm
}

inline join_validate(j) {
  validated = 1;
#ifndef MUTANT_JOIN_PING_SILENT
  hi = 0;
  do
  :: hi < N ->
     if
     :: PINGED(j, hi) -> HEAR(hi, hver[j])
     :: else -> skip
     fi;
     hi++
  :: else -> break
  od;
  hi = 0;
#endif
  skip
}

inline join_activate(j) {
  tver++; current = 0; CLR(joinm, j);
  vver[j] = tver; hver[j] = tver;
  vdead[j] = deadm; kdead[j] = 0; lage[j] = 0;
#ifdef MUTANT_JOINER_NO_WAIT
  lwait[j] = 0
#else
  if
  :: (deadm | B(j)) == B(N) - 1 -> lwait[j] = 0     /* alone: nobody else held the key */
  :: else -> lwait[j] = WAIT_TICKS
  fi
#endif
}

/* every member of me's view that answers its ask hears me's newest version */
inline tell_members(me) {
  hi = 0;
  do
  :: hi < N ->
     if
     :: MEMBER(me, hi) && ANSWERS(me, hi) -> HEAR(hi, hver[me])
     :: else -> skip
     fi;
     hi++
  :: else -> break
  od;
  hi = 0
}
#endif
#else
#define COMMITTED(me)   skip
#endif
#else
#define READING(x)      0
#define CONFIRM(me)     skip
#define LEASE_FORGET(x)
#define COMMITTED(me)   skip
#endif

/* ---- the environment: every choice is optional and bounded -------------------------- */
/* Symmetry (-DSYMMETRY, safety runs): until the first fault, partition or loss every silo
 * is in the same state, so the first such event may be taken, up to a renaming of the
 * silos, to hit silo 0, to cut off {0} or {0,1}, or to lose the pair (0,1). */
#ifdef SYMMETRY
#define SYM_FAULT(x)   (broken || (x) == 0)
#define SYM_SPLIT(m)   (broken || hev != 0 || (m) == 1 || ((m) == 3 && N >= 4))
#define SYM_LOSE(a, b) (broken || hev != 0 || ((a) == 0 && (b) == 1))
#else
#define SYM_FAULT(x)   1
#define SYM_SPLIT(m)   1
#define SYM_LOSE(a, b) 1
#endif
#define CRASH(x) :: faults_left > 0 && (x) < N && !FAILED(x) && !TERM(x) && SYM_FAULT(x) -> \
                    SET(crashm, x); SET(failm, x); faults_left--; clear_rows(x); end_vote(x); hev = 1 \
                    LEASE_FORGET(x)
#define HANG(x)  :: faults_left > 0 && (x) < N && !FAILED(x) && !TERM(x) && SYM_FAULT(x) -> \
                    SET(hungm, x); SET(failm, x); faults_left--; hev = 1
#define SPLIT(m) :: (m) < B(N - 1) && SYM_SPLIT(m) -> part = m
#define RESUME(x) :: (x) < N && HUNG(x) -> CLR(hungm, x); downv = downv & ~(3 << (2 * (x)))
#define LOSE(a, b) \
  if \
  :: skip \
  :: loss_left > 0 && (b) < N && SYM_LOSE(a, b) -> lostm = lostm | B(PAIR(a, b)); loss_left--; hev = hev | 4 \
  fi

#ifdef LIVENESS
/* liveness runs: a silo that stopped heartbeating is stale STALE_AFTER rounds later at the
 * latest (downv counts the rounds) */
#define GO_STALE(x) \
        if \
        :: DOWN(x) + 1 >= STALE_AFTER -> SET(stalem, x); downv = downv & ~(3 << (2 * (x))) \
        :: DOWN(x) + 1 < STALE_AFTER -> downv = downv + (1 << (2 * (x))) \
        :: DOWN(x) + 1 < STALE_AFTER -> SET(stalem, x); downv = downv & ~(3 << (2 * (x))) \
        fi
#else
/* safety runs: any time after it stopped, or never: every timing of the real limit */
#define GO_STALE(x) \
        if \
        :: skip \
        :: SET(stalem, x) \
        fi
#endif
#define FRESHNESS(x) \
  if \
  :: (x) < N && STALE(x) && RUNNING(x) -> CLR(stalem, x) \
  :: (x) < N && !STALE(x) && !RUNNING(x) && !tdown -> GO_STALE(x) \
  :: else -> skip \
  fi

inline environment() {
  hev = 0;
  /* a crash or a hang (SIGKILL, SIGSTOP) */
  if
  :: skip
  CRASH(0) CRASH(1) CRASH(2) CRASH(3) CRASH(4)
  HANG(0) HANG(1) HANG(2) HANG(3) HANG(4)
  fi;
  /* one partition into any two non-empty sides, at any moment (silo N-1 stays on side 0:
   * the sides are symmetric); the table stays reachable from both */
  if
  :: !split ->
     if
     :: skip
     :: split = 1; hev = hev | 2;
        if
        SPLIT(1) SPLIT(2) SPLIT(3) SPLIT(4) SPLIT(5) SPLIT(6) SPLIT(7) SPLIT(8)
        SPLIT(9) SPLIT(10) SPLIT(11) SPLIT(12) SPLIT(13) SPLIT(14) SPLIT(15)
        fi
     fi
  :: else -> skip
  fi;
  /* freshness (liveness.LivenessTracker): a silo that stopped heartbeating goes stale at
   * any round after it stopped (the real limit is longer than the suspicion: going stale
   * early only helps an accuser), and at the latest STALE_AFTER rounds after; a silo that
   * resumed heartbeats again and is fresh one round later. Not while the table is down:
   * time nobody can read does not count (blind time). */
  FRESHNESS(0); FRESHNESS(1); FRESHNESS(2); FRESHNESS(3); FRESHNESS(4);
  /* a hung silo resumes (SIGCONT), or never does */
  if
  :: skip
  RESUME(0) RESUME(1) RESUME(2) RESUME(3) RESUME(4)
  fi;
  /* message loss: every message between two silos in the coming round (any set of pairs) */
  LOSE(0, 1); LOSE(0, 2); LOSE(0, 3); LOSE(0, 4); LOSE(1, 2);
  LOSE(1, 3); LOSE(1, 4); LOSE(2, 3); LOSE(2, 4); LOSE(3, 4);
#ifdef SYMMETRY
  broken = broken || hev != 0;
#endif
  hev = 0;
  /* a table outage lasts one round */
  if
  :: tdown -> tdown = 0
  :: !tdown && outages_left > 0 -> tdown = 1; outages_left--
  :: !tdown -> skip
  fi
}

/* a running silo between its read and its write: table calls take milliseconds and a probe
 * round seconds, so no round passes meanwhile unless the silo hangs */
#define WRITING(x) ((x) < N && BIT(writem, x) && RUNNING(x))
#define ANY_WRITING ((writem & ~crashm & ~hungm) != 0)
#define HANG_WRITER(x) :: faults_left > 0 && WRITING(x) && !FAILED(x) -> \
                          SET(hungm, x); SET(failm, x); faults_left--

proctype Clock() {
end_clock:
  do
#ifdef LEASE
  :: atomic { !ANY_WRITING -> d_step { lease_tick() }; environment(); d_step { probe_round() } }
#else
  :: atomic { !ANY_WRITING -> environment(); d_step { probe_round() } }
#endif
  /* a silo hangs between its read and its write (a long GC pause): it writes when it resumes */
  :: atomic { if HANG_WRITER(0) HANG_WRITER(1) HANG_WRITER(2) HANG_WRITER(3) HANG_WRITER(4) fi }
  od
}

/* ======================================================================================= */
/* A silo: its vote (SiloHealthMonitor.evaluate, MembershipTableManager.try_vote/_vote_once)
 * and its periodic refresh or gossip-triggered read (refresh, _check_own_row). */

inline stop_serving(me) {
  SET(termm, me); end_vote(me); clear_rows(me) LEASE_FORGET(me)
}

/* the read of _vote_once and votes.decide_vote */
inline vote_read(me) {
  ht = vtarget[me];
  if
  :: tdown -> end_vote(me)                               /* table error: no vote */
#ifndef MUTANT_NO_SELF_TERMINATION
  :: !tdown && DEAD(me) -> stop_serving(me)              /* it reads itself Dead */
  :: !tdown && !DEAD(me) && DEAD(ht) -> CONFIRM(me); end_vote(me)   /* ALREADY_GONE */
  :: !tdown && !DEAD(me) && !DEAD(ht) ->
#else
  :: !tdown && DEAD(ht) -> end_vote(me)
  :: !tdown && !DEAD(ht) ->
#endif
     SET(current, me);
     CONFIRM(me);
     /* the fresh votes minus those of Dead voters, plus our own */
     vvotes[me] = (votes[ht] & ~deadm) | B(me);
#ifdef MUTANT_INTERMEDIARY_VOTES
     vvotes[me] = vvotes[me] | (ivm[IDX(me, ht)] & ~deadm);
#endif
     hfa = FRESH_ACTIVE(me);
     hreq = REQUIRED(hfa);
     if
     :: POP(vvotes[me]) >= hreq -> SET(killm, me)
     :: else -> CLR(killm, me)
     fi;
     hfa = 0; hreq = 0;
     SET(writem, me)
  fi;
  ht = 0
}

/* update_row(entry, row_etag, read.version.next()): it succeeds iff nobody wrote since our
 * read (every versioned write bumps the version, and the row's etag with it) */
inline conditional_write(me) {
  ht = vtarget[me];
  if
#ifdef MUTANT_BLIND_WRITE
  :: !tdown ->
#else
  :: !tdown && BIT(current, me) ->
#endif
     /* we write version read+1: it is new iff nobody wrote since our read */
     version_written_once = BIT(current, me);       CHECK(version_written_once);
     dead_is_terminal = !DEAD(ht);                    CHECK(dead_is_terminal);
     dead_silo_writes_nothing = !DEAD(me);            CHECK(dead_silo_writes_nothing);
     /* a write adds only the writer's own vote (so, by induction, every voter in a row
      * cast its vote itself, on S rounds of silence it observed: voter_observed_silence) */
     own_vote_only = ((vvotes[me] & ~(votes[ht] | B(me))) == 0);
     CHECK(own_vote_only);
     if
     :: BIT(killm, me) ->
        /* the fresh Active silos the writer counted include every never-failed Active one */
        quorum_of_distinct_voters = (POP(vvotes[me]) >= REQUIRED(NF_ACTIVE));
        CHECK(quorum_of_distinct_voters);
        /* never a silo that never failed, on a side whose never-failed silos are a majority */
        majority_side_survives = !(!FAILED(ht) && 2 * NF_SIDE(SIDE(ht)) > N);
        CHECK_PARTITION(majority_side_survives);
        row_dead(ht)
     :: else ->
        CLR(deadm, ht); votes[ht] = vvotes[me]          /* the row as read, with our vote */
     fi;
     current = 0;                                       /* the version moved on */
     COMMITTED(me);
     end_vote(me)
#ifndef MUTANT_BLIND_WRITE
  :: !tdown && !BIT(current, me) && vattempt[me] + 1 < VOTE_ATTEMPTS ->
     vattempt[me]++; vote_read(me)                      /* lost race: at once, a fresh read */
  :: !tdown && !BIT(current, me) && vattempt[me] + 1 >= VOTE_ATTEMPTS -> end_vote(me)
#endif
  :: tdown -> end_vote(me)                              /* table error: no vote */
  fi;
  ht = 0
}

proctype Silo(byte me) {
#ifdef JOINS
  if
  :: me == JOINER ->
end_insert:
     atomic { !tdown && SERVING(me) -> join_insert(me) };
end_validate:
     atomic { SERVING(me) && VALIDATES(me) -> join_validate(me) };
end_activate:
     atomic { !tdown && SERVING(me) -> join_activate(me) }
  :: else -> skip
  fi;
#endif
end_silo:
  do
  :: atomic {
       !BIT(writem, me) && !READING(me) && SERVING(me) && !tdown && ANY_VOTE(me) ->
       if
       :: CAN_VOTE(me, 0) -> vtarget[me] = 0
       :: CAN_VOTE(me, 1) -> vtarget[me] = 1
       :: CAN_VOTE(me, 2) -> vtarget[me] = 2
       :: CAN_VOTE(me, 3) -> vtarget[me] = 3
       :: CAN_VOTE(me, 4) -> vtarget[me] = 4
       fi;
       /* the vote is decided on our own evidence: S rounds of silence, no veto */
       voter_observed_silence = (MISS(me, vtarget[me]) == S && RDY(me, vtarget[me]));
       CHECK(voter_observed_silence);
       /* the vote task reads the table at once (milliseconds, not rounds) */
       vote_read(me)
     }
  :: atomic { BIT(writem, me) && RUNNING(me) -> conditional_write(me) }
  :: atomic {
       !BIT(writem, me) && !READING(me) && SERVING(me) && !tdown && !ANY_VOTE(me) ->
       /* the periodic refresh, a read on gossip or the lease's read: a silo that reads itself
        * Dead stops; one that reads itself Active renews its lease */
#ifndef MUTANT_NO_SELF_TERMINATION
       if
       :: DEAD(me) -> stop_serving(me)
       :: else -> CONFIRM(me)
       fi
#else
       skip
#endif
     }
#ifdef LEASE
  /* it serves the key (work for it, a request checks the lease first) */
  :: atomic { SERVES(me) -> serve(me) }
  /* a graceful stop (SIGTERM) */
  :: atomic {
       leaves_left > 0 && !BIT(writem, me) && !READING(me) && SERVING(me) && !DEAD(me) && !tdown ->
       leave(me)
     }
#ifdef MUTANT_LEAVE_WRITES_FIRST
  :: atomic { BIT(leavingm, me) && RUNNING(me) -> stop_serving(me) }
#endif
#if defined(PEERS) && !defined(JOINS)
  /* the table is down: it asks every other member of its view (ConfirmMembership) */
  :: atomic {
       tdown && !BIT(writem, me) && !READING(me) && SERVING(me) && MAY_ASK(me) && VOUCHED(me) ->
       vouched(me)
     }
#endif
#ifdef JOINS
  /* the same, and every member that answers takes the asker's newest version as heard first
   * (ConfirmMembershipRequest.known_version), whether or not the ask renews the lease */
  :: atomic {
       tdown && !BIT(writem, me) && !READING(me) && SERVING(me) && !BIT(vdead[me], me) ->
       tell_members(me);
       if
       :: MAY_ASK(me) && VOUCHED(me) -> vouched(me)
       :: else -> skip
       fi
     }
#endif
  /* a read whose answer takes rounds: it is linearized when sent (the latest anchor it could
   * claim), its answer is taken in when it returns; meanwhile the silo reads nothing else */
  :: atomic { delays_left > 0 && rdm == 0 && !BIT(writem, me) && SERVING(me) && !tdown ->
              delays_left--; rdm = B(me); rdage = 0; rdview = KVIEW; rdok = !DEAD(me)
#ifdef PEERS
              ; rdver = tver
#endif
            }
  :: atomic {
       READING(me) && RUNNING(me) ->
       if
       :: !rdok -> stop_serving(me)
       :: else ->
#ifdef MUTANT_LEASE_FROM_RETURN
          confirm(me, rdview, 0);
#else
          confirm(me, rdview, rdage);
#endif
#ifdef PEERS
          READ_VERSION(me, rdver); rdver = 0;
#endif
          rdm = 0; rdage = 0; rdview = 0; rdok = 0
       fi
     }
#endif
  od
}

init {
  atomic {
#ifdef JOINS
    /* the joiner is in nobody's view; silo 1 owns the key, confirmed just now */
    hi = 0;
    do
    :: hi < N -> kdead[hi] = B(JOINER) & AHEAD(hi); vdead[hi] = B(JOINER); hi++
    :: else -> break
    od;
    lage[JOINER] = LEASE_TICKS;
#endif
    run Clock();
    hi = 0;
    do
    :: hi < N -> run Silo(hi); hi++
    :: else -> break
    od;
    hi = 0
  }
}

/* ---- liveness, under weak fairness (silo 0 stands for any silo: the model is symmetric) -- */
/* a silo declared Dead eventually stops serving */
ltl dead_stops { [] (DEAD(0) -> <> !SERVING(0)) }
/* a crashed silo is eventually declared Dead while a majority of the silos is connected */
ltl crash_detected { [] ((CRASHED(0) && MAJORITY_CONNECTED) -> <> (DEAD(0) || !MAJORITY_CONNECTED)) }
/* both in one run */
ltl liveness { [] (DEAD(0) -> <> !SERVING(0)) &&
               [] ((CRASHED(0) && MAJORITY_CONNECTED) -> <> (DEAD(0) || !MAJORITY_CONNECTED)) }
/* Dead is terminal (also asserted at every write) */
ltl dead_terminal { [] (DEAD(0) -> [] DEAD(0)) }

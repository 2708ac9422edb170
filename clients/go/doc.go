// Package rewardagent sends rewards from a Go service through the host's reward agent
// (reward-agent: the pipeline's SDK behind gRPC reward.v1.RewardAgent, docs/agent.md).
//
// A reward answered as [Issued] is durable and is credited exactly once; give its
// Token to the user. Every other answer is an [*Error] of one [Kind]:
//
//   - [KindInvalid]: a field breaks the limits ([Error.Field] names it) or the reward
//     type is unknown. Nothing was kept; do not resend it as it is.
//   - [KindRefused]: refused before anything was kept. BACKPRESSURE and CLOSING may
//     be resent later ([Error.Resend]); TOO_MANY_TOKENS, SEAL_FAILED and
//     UNAUTHENTICATED may not.
//   - [KindInDoubt]: the reward may be durable (and is then credited). Resend it with
//     the SAME trade number for a definite answer, which never makes a second
//     reward ([Client.SendSettled] does it). Every failure of the call itself (a
//     deadline, an agent gone) is in doubt, and so is an error code this client does
//     not know (a newer agent).
//
// The scene helpers ([RedEnvelopeRain], [CardCollection], [Fireworks]) build the trade
// number as the Rust SDK and every other client do, activity:scene:round:user, so the
// same reward asked for twice carries the same one (clients/conformance keeps the
// clients equal).
package rewardagent

// Original file: proto/reward/v1/agent.proto

export const HeldBy = {
  HELD_BY_UNSPECIFIED: 'HELD_BY_UNSPECIFIED',
  HELD_BY_STORE: 'HELD_BY_STORE',
  HELD_BY_QUEUE: 'HELD_BY_QUEUE',
  HELD_BY_SPOOL: 'HELD_BY_SPOOL',
} as const;

export type HeldBy =
  | 'HELD_BY_UNSPECIFIED'
  | 0
  | 'HELD_BY_STORE'
  | 1
  | 'HELD_BY_QUEUE'
  | 2
  | 'HELD_BY_SPOOL'
  | 3

export type HeldBy__Output = typeof HeldBy[keyof typeof HeldBy]

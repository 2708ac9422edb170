// Original file: proto/reward/v1/agent.proto

import type { HeldBy as _reward_v1_HeldBy, HeldBy__Output as _reward_v1_HeldBy__Output } from '../../reward/v1/HeldBy.js';

export interface IssuedReward {
  'token'?: (string);
  'trade_no'?: (string);
  'queue'?: (string);
  'held_by'?: (_reward_v1_HeldBy);
}

export interface IssuedReward__Output {
  'token': (string);
  'trade_no': (string);
  'queue': (string);
  'held_by': (_reward_v1_HeldBy__Output);
}

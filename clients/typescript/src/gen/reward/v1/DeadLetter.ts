// Original file: proto/reward/v1/event.proto

import type { RewardEvent as _reward_v1_RewardEvent, RewardEvent__Output as _reward_v1_RewardEvent__Output } from '../../reward/v1/RewardEvent.js';
import type { Long } from '@grpc/proto-loader';

export interface DeadLetter {
  'event'?: (_reward_v1_RewardEvent | null);
  'raw'?: (Buffer | Uint8Array | string);
  'reason'?: (string);
  'error_code'?: (string);
  'source_topic'?: (string);
  'dead_at_ms'?: (number | string | Long);
}

export interface DeadLetter__Output {
  'event': (_reward_v1_RewardEvent__Output | null);
  'raw': (Buffer);
  'reason': (string);
  'error_code': (string);
  'source_topic': (string);
  'dead_at_ms': (number);
}

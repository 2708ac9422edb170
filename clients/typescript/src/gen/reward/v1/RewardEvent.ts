// Original file: proto/reward/v1/event.proto

import type { UserInfo as _reward_v1_UserInfo, UserInfo__Output as _reward_v1_UserInfo__Output } from '../../reward/v1/UserInfo.js';
import type { Long } from '@grpc/proto-loader';

export interface RewardEvent {
  'trade_no'?: (string);
  'user'?: (_reward_v1_UserInfo | null);
  'activity_id'?: (string);
  'scene_id'?: (string);
  'reward_type'?: (string);
  'amount'?: (number | string | Long);
  'extension'?: ({[key: string]: string});
  'retry_count'?: (number);
  'created_at_ms'?: (number | string | Long);
  'description'?: (string);
  'not_before_ms'?: (number | string | Long);
  'expires_at_ms'?: (number | string | Long);
  'proof'?: (Buffer | Uint8Array | string);
}

export interface RewardEvent__Output {
  'trade_no': (string);
  'user': (_reward_v1_UserInfo__Output | null);
  'activity_id': (string);
  'scene_id': (string);
  'reward_type': (string);
  'amount': (number);
  'extension': ({[key: string]: string});
  'retry_count': (number);
  'created_at_ms': (number);
  'description': (string);
  'not_before_ms': (number);
  'expires_at_ms': (number);
  'proof': (Buffer);
}

// Original file: proto/reward/v1/agent.proto

import type { UserInfo as _reward_v1_UserInfo, UserInfo__Output as _reward_v1_UserInfo__Output } from '../../reward/v1/UserInfo.js';
import type { Long } from '@grpc/proto-loader';

export interface SendRewardRequest {
  'trade_no'?: (string);
  'user'?: (_reward_v1_UserInfo | null);
  'activity_id'?: (string);
  'scene_id'?: (string);
  'reward_type'?: (string);
  'amount'?: (number | string | Long);
  'description'?: (string);
  'extension'?: ({[key: string]: string});
}

export interface SendRewardRequest__Output {
  'trade_no': (string);
  'user': (_reward_v1_UserInfo__Output | null);
  'activity_id': (string);
  'scene_id': (string);
  'reward_type': (string);
  'amount': (number);
  'description': (string);
  'extension': ({[key: string]: string});
}

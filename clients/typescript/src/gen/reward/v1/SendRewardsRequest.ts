// Original file: proto/reward/v1/agent.proto

import type { SendRewardRequest as _reward_v1_SendRewardRequest, SendRewardRequest__Output as _reward_v1_SendRewardRequest__Output } from '../../reward/v1/SendRewardRequest.js';

export interface SendRewardsRequest {
  'rewards'?: (_reward_v1_SendRewardRequest)[];
}

export interface SendRewardsRequest__Output {
  'rewards': (_reward_v1_SendRewardRequest__Output)[];
}

// Original file: proto/reward/v1/event.proto


export interface UserInfo {
  'user_id'?: (string);
  'device_id'?: (string);
  'app_id'?: (string);
}

export interface UserInfo__Output {
  'user_id': (string);
  'device_id': (string);
  'app_id': (string);
}

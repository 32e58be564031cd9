include $(sort $(wildcard $(BR2_EXTERNAL_UNWOUND_PATH)/package/*/*.mk))
